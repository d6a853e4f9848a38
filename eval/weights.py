"""Whether a HuggingFace model folder's weights can be loaded as its config.json describes, read
from the safetensors headers alone (no tensor is loaded).

    check_weights(folder)    # raises BadWeights, one sentence naming the file or the tensor

A cut-short or foreign `model.safetensors` (or a shard of `model.safetensors.index.json`) is named
with safetensors' own reason; a tensor whose shape is not the one the config asks for is named
with both shapes, a parameter the files lack by its name. transformers would stop with a traceback
on the first and initialise the second afresh, with a warning; verl's merger writes either without
complaint. The expected shapes come from the model built on the meta device (no memory); an
architecture transformers cannot build here (remote code) gets the header check only; weights in
another form (`pytorch_model.bin`: reading it means unpickling it) are not checked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SAFETENSORS, INDEX = "model.safetensors", "model.safetensors.index.json"
BIN = "pytorch_model.bin"  # not read here: named in the error only


class BadWeights(ValueError):
    """A model folder whose weights cannot be what its config describes; the message is one sentence."""


def _files(folder: Path) -> list[Path]:
    """The safetensors files holding the model's weights (the index's shards, or model.safetensors)."""
    index = folder / INDEX
    if index.exists():
        try:
            shards = json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()
            names = sorted({str(s) for s in shards})
        except (OSError, UnicodeError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise BadWeights(f"{index}: not a safetensors index ({type(e).__name__})") from None
        if not names or any(Path(n).is_absolute() or ".." in Path(n).parts for n in names):
            raise BadWeights(f"{index}: its weight_map names no shard, or one outside the folder")
        return [folder / n for n in names]
    return [folder / SAFETENSORS]


def saved_shapes(folder: str | os.PathLike) -> dict[str, tuple[int, ...]] | None:
    """Tensor name -> shape over the folder's safetensors files; None when its weights are in
    another form (pytorch_model.bin, a layout of vLLM's own). BadWeights when a file is missing or
    unreadable, or the folder holds no weights at all."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    if not (folder / SAFETENSORS).exists() and not (folder / INDEX).exists():
        if any(p.suffix in (".bin", ".safetensors", ".pt") for p in folder.iterdir()):
            return None
        raise BadWeights(f"{folder}: no model weights ({SAFETENSORS}, {INDEX} or {BIN})")
    shapes: dict[str, tuple[int, ...]] = {}
    for path in _files(folder):
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    shapes[name] = tuple(f.get_slice(name).get_shape())
        except FileNotFoundError:
            raise BadWeights(f"{path}: missing") from None
        except (SafetensorError, OSError) as e:  # cut short, a foreign header, a folder
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise BadWeights(f"{path}: unreadable ({reason})") from None
    return shapes


_EXPECTED: dict[str, tuple | None] = {}  # config.json's text -> expected_shapes (a run's steps share one)


def expected_shapes(folder: Path) -> tuple[dict[str, tuple[int, ...]], list[list[str]]] | None:
    """(state-dict name -> shape, groups of names that are one parameter: tied weights, of which a
    file needs one) of the model config.json describes, or None when transformers cannot build it;
    BadWeights when config.json is not a JSON object."""
    path = folder / "config.json"
    try:
        key = path.read_text(encoding="utf-8")
        if not isinstance(json.loads(key), dict):
            raise ValueError("not an object")
    except (OSError, UnicodeError, ValueError) as e:  # a cut-short copy, say
        raise BadWeights(f"{path}: not a model config ({type(e).__name__})") from None
    if key not in _EXPECTED:
        _EXPECTED[key] = _build(folder)
    return _EXPECTED[key]


def _build(folder: Path) -> tuple[dict[str, tuple[int, ...]], list[list[str]]] | None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(folder))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # noqa: BLE001 - remote code, an architecture this transformers lacks: headers only
        return None
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    return shapes, list(groups.values())


def check_weights(folder: str | os.PathLike) -> None:
    """Raise BadWeights unless every weight file of `folder` is readable and holds every parameter
    of its config's model, each of the shape the config asks for (module docstring)."""
    folder = Path(folder)
    saved = saved_shapes(folder)
    if saved is None:
        return
    expected = expected_shapes(folder)
    if expected is None:
        return
    shapes, groups = expected
    for name, shape in saved.items():
        if name in shapes and shapes[name] != shape:
            raise BadWeights(
                f"{folder}: tensor {name} has shape {list(shape)}, its config.json asks for {list(shapes[name])}"
            )
    missing = [names[0] for names in groups if not any(n in saved for n in names)]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise BadWeights(
            f"{folder}: no tensor {missing[0]}{more} in its weights, which its config.json asks for"
        )
