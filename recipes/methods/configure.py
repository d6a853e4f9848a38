"""The configure step: after Hydra has composed a config, each active method sets the keys it
implies (`Method.configure`), so that no value depends on the order of `method=[...]`.

Why the order mattered: `method` is a list group, and Hydra merges its files in list order, so when
two of them set one key the later file wins (`method=[prorl,grpo]` took GRPO's kl_loss_coef 0.001,
`method=[grpo,prorl]` ProRL's 1e-4). Now only baselines set verl keys in their YAML, and a run has
exactly one; an add-on's YAML sets its `recipes.*` keys alone, and the verl keys it implies (its
declaration's `derives`, recipes/methods/manifest.py) are set here, from its settings, after every
file has been merged. Each method's `configure` reads the composed config before any of them
writes, so the methods' own order does not matter either; two methods that set one key to
different values are a ConfigError.

What a preset or the command line sets itself is not silently replaced: `explicit_keys` names
those keys (the experiment preset's files, the presets it extends, and the command line's
overrides). When such a key is set more directly than the settings it comes from (the command
line over a preset, a preset over the defaults: base.py `decides`), a method's `configure` takes
the key as given and sets its settings from it (e.g. an explicit rollout.n gives TA-GRPO's G), or
refuses a value it cannot run with; set at the same level, the two must agree.

recipes.train calls `configure` on every composition (recipes/train.py `compose` and its Hydra
main), before any check. It imports only the modules of active methods that derive keys.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from recipes.methods import manifest
from recipes.methods.base import COMMAND_LINE
from recipes.settings import ConfigError, load

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def method_settings(cfg, method):
    """`method`'s settings dataclass read from `recipes.<name>` (True if it has none)."""
    if method.settings is None:
        return True
    raw = OmegaConf.select(cfg, f"recipes.{method.name}")
    raw = OmegaConf.to_container(raw, resolve=True) if raw is not None else {}
    return load(method.settings, raw, f"recipes.{method.name}")


def _preset_files(experiment: str | None) -> list[Path]:
    """The experiment preset's file and those of the presets it extends (its defaults list
    entries in the same group), the preset itself last."""
    files: list[Path] = []
    todo = [experiment] if experiment else []
    while todo:
        path = CONFIGS / "experiment" / f"{todo.pop()}.yaml"
        if not path.is_file() or path in files:
            continue
        files.insert(0, path)
        for entry in (yaml.safe_load(path.read_text()) or {}).get("defaults") or []:
            if isinstance(entry, str) and entry != "_self_" and "/" not in entry:
                todo.append(entry)
    return files


def _leaf_keys(node: Mapping, prefix: str = "") -> Iterable[str]:
    for key, value in node.items():
        if not prefix and key in ("defaults", "hydra"):
            continue
        if isinstance(value, Mapping) and value:
            yield from _leaf_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def explicit_keys(overrides: Iterable[str] = (), experiment: str | None = None) -> dict[str, str]:
    """Every key that the experiment preset (with the presets it extends) or the command line
    sets itself, with where: key -> "configs/experiment/<name>.yaml" or "the command line"."""
    out = {}
    for path in _preset_files(experiment):
        for key in _leaf_keys(yaml.safe_load(path.read_text()) or {}):
            out[key] = str(path.relative_to(CONFIGS.parent))
    for arg in overrides:
        if "=" in arg:
            out[arg.lstrip("+~").split("=", 1)[0]] = COMMAND_LINE
    return out


def configure(cfg, overrides: Iterable[str] = (), experiment: str | None = None) -> None:
    """Set, in the composed `cfg`, the keys each active method's `configure` implies (module doc).
    `overrides` and `experiment`: the command line's overrides and the experiment choice."""
    marks = OmegaConf.select(cfg, "recipes.methods") or {}
    order = manifest.ordered(marks)
    if list(marks) != order:  # the marks in declaration order too: the saved config.yaml is the same
        marks = {**{n: marks[n] for n in order}, **{n: v for n, v in marks.items() if n not in order}}
        OmegaConf.update(cfg, "recipes.methods", marks, merge=False)
    active = [manifest.DECLARED[n] for n in order if n in manifest.DECLARED]
    active = [d for d in active if d.derives]
    if not active:
        return
    explicit = explicit_keys(overrides, experiment)
    updates: dict[str, tuple[str, Any]] = {}
    for declaration in active:
        method = importlib.import_module(declaration.module).METHOD
        for key, value in method.configure(cfg, method_settings(cfg, method), explicit).items():
            if key not in declaration.derives and not key.startswith(f"recipes.{method.name}."):
                raise RuntimeError(f"method {method.name} sets {key}, which its declaration does not derive")
            if key in updates and updates[key][1] != value:
                raise ConfigError(
                    f"{key}: methods {updates[key][0]} and {method.name} set it to {updates[key][1]!r} and "
                    f"{value!r}; they cannot run together."
                )
            updates[key] = (method.name, value)
    for key, (_, value) in updates.items():
        OmegaConf.update(cfg, key, value, merge=False)
