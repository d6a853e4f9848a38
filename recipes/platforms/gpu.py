"""What a GPU launch decides and checks before Ray starts (platform=gpu; recipes.train's preflight).

Attention (`recipes.attention`). verl loads the actor with FlashAttention 2 and, with
`use_remove_padding`, packs a micro-batch's sequences into one row without their padding; that
packing needs FlashAttention's variable-length kernels, from the `flash-attn` package. flash-attn
is not a dependency of verl[vllm], has no official wheel for torch 2.11 + CUDA 13, and builds for
about an hour against the CUDA toolkit. So:

  auto   (default) FlashAttention 2 with remove-padding when flash-attn imports; otherwise PyTorch's
         sdpa with remove-padding off, said in one line with its cost
  flash  FlashAttention 2, refused in one line when flash-attn is not installed
  sdpa   PyTorch's sdpa with remove-padding off, whatever is installed

An attn_implementation set by hand (`+actor_rollout_ref.model.override_config.attn_implementation=X`)
is used as given. Ulysses sequence parallelism needs remove-padding, so it needs flash-attn.

The driver. PyPI's torch wheels carry their own CUDA runtime; the NVIDIA driver must support it:
CUDA 13.x needs the R580 driver series or newer, CUDA 12.x R525 (NVIDIA's minor-version
compatibility table). `check_driver` reads nvidia-smi's driver version and torch's CUDA version.
A node with an older driver can still run a newer CUDA through NVIDIA's CUDA forward-compatibility
libraries (the `cuda-compat` package, on data-center GPUs): there `RECIPES_SKIP_DRIVER_CHECK=1`
skips the version comparison, and only it (a missing driver or a CPU torch still stop the launch),
and says so in one line.

Offline nodes. `inputs` says whether everything a run reads is on this node: the model (a folder,
or a hub id whose whole snapshot is in the Hugging Face cache, `$HF_HOME/hub`) and the data files
(`$RECIPES_CACHE/data/...`). Then `HF_HUB_OFFLINE=1` is safe and saves every process its Hub
lookups (on a node without network each one waits for its timeout). When a hub model is missing,
the run downloads it if this node reaches the Hub, else it cannot start: one line says which, and
what to fetch beforehand.

    python -m recipes.platforms.gpu driver                 # one line; exit 2 when the driver is too old
    python -m recipes.offline OVERRIDES...                 # one line; exit 2 when something cannot be got
                                                           # (recipes/offline.py: it composes the config)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recipes.settings import ConfigError, select

if TYPE_CHECKING:  # the driver check runs where only torch is installed (gpu_smoke.sh)
    from omegaconf import DictConfig

ATTN_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
RMPAD_KEY = "actor_rollout_ref.model.use_remove_padding"
SP_KEY = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
ATTENTION_CHOICES = ("auto", "flash", "sdpa")
INSTALL_FLASH = "pip install flash-attn --no-build-isolation (docs/running.md#the-gpu-environment)"

# The oldest driver series that runs each CUDA major version (minor-version compatibility).
MIN_DRIVER = {11: 450, 12: 525, 13: 580}
# Set to 1 on nodes whose CUDA forward-compatibility libraries run a newer CUDA on an older driver.
SKIP_DRIVER_ENV = "RECIPES_SKIP_DRIVER_CHECK"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def flash_attn_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None


def resolve_attention(cfg: DictConfig, flash_available: bool | None = None) -> str | None:
    """Settle the actor's attention from `recipes.attention` (module docstring), editing cfg.
    Returns the line to print when the run falls back to sdpa, else None. Raises ConfigError."""
    from omegaconf import open_dict

    choice = select(cfg, "recipes.attention") or "auto"
    if choice not in ATTENTION_CHOICES:
        raise ConfigError(f"recipes.attention={choice}: one of {', '.join(ATTENTION_CHOICES)}.")
    impl = select(cfg, ATTN_KEY)
    if impl not in (None, "flash_attention_2"):
        return None  # set by hand (the CPU platform sets sdpa)
    if flash_available is None:
        flash_available = flash_attn_installed()
    if choice == "flash" or (choice == "auto" and flash_available):
        if not flash_available:
            raise ConfigError(
                f"recipes.attention=flash needs the flash-attn package, which is not installed: {INSTALL_FLASH}."
            )
        return None
    sp = int(select(cfg, SP_KEY) or 1)
    if sp > 1:
        raise ConfigError(
            f"{SP_KEY}={sp} needs remove-padding, which needs flash-attn (not installed): {INSTALL_FLASH}, "
            "or set it to 1."
        )
    with open_dict(cfg):
        cfg.actor_rollout_ref.model.setdefault("override_config", {})
        cfg.actor_rollout_ref.model.override_config.attn_implementation = "sdpa"
        cfg.actor_rollout_ref.model.use_remove_padding = False
    if choice == "sdpa":
        return "attention: PyTorch's sdpa, padding kept (recipes.attention=sdpa)"
    return (
        "attention: flash-attn is not installed, so PyTorch's sdpa with padding kept "
        "(use_remove_padding=false): the actor and reference compute every micro-batch at its longest "
        f"sequence, slower and more memory on long responses; for FlashAttention 2: {INSTALL_FLASH}"
    )


# ------------------------------------------------------------------------------------ driver
def required_driver(cuda: str) -> int:
    """The oldest driver series (e.g. 580) for a CUDA runtime version such as '13.0'."""
    major = int(cuda.split(".")[0])
    if major not in MIN_DRIVER:
        raise ConfigError(f"torch was built for CUDA {cuda}, which this check does not know.")
    return MIN_DRIVER[major]


def driver_version() -> str | None:
    """The NVIDIA driver version of this node (nvidia-smi), or None without nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError("nvidia-smi did not answer in 30 s: the GPU driver is not responding.") from None
    versions = out.stdout.split()
    if out.returncode != 0 or not versions:
        said = " ".join((out.stderr or out.stdout).split())[:200]
        raise ConfigError(f"nvidia-smi failed (exit {out.returncode}): {said or 'no output'}.")
    return versions[0]


def torch_cuda() -> str | None:
    import torch

    return torch.version.cuda


def skip_driver_check() -> bool:
    """RECIPES_SKIP_DRIVER_CHECK: 1 skips the driver-version comparison; unset or 0 keeps it."""
    value = os.environ.get(SKIP_DRIVER_ENV, "").strip().lower()
    if value in _FALSE:
        return False
    if value in _TRUE:
        return True
    raise ConfigError(
        f"{SKIP_DRIVER_ENV}={value!r}: 1 skips the NVIDIA driver-version check, 0 or unset keeps it."
    )


def check_driver(driver: str | None, cuda: str | None) -> str:
    """One line saying the driver fits torch's CUDA, or that RECIPES_SKIP_DRIVER_CHECK=1 skips that
    comparison; raises ConfigError naming the driver found, the one needed and what to do."""
    if cuda is None:
        raise ConfigError(
            "platform=gpu: this torch is a CPU build (torch.version.cuda is None); install the GPU "
            "environment (environment.yml, docs/running.md#the-gpu-environment)."
        )
    need = required_driver(cuda)
    if driver is None:
        raise ConfigError(
            "platform=gpu: no NVIDIA driver on this node (nvidia-smi not found); run on a GPU node, or "
            "use platform=cpu."
        )
    if skip_driver_check():
        # forward compatibility: the node's libcuda comes from cuda-compat, newer than its driver
        return (
            f"driver: NVIDIA {driver}, not compared with the R{need}+ that torch's CUDA {cuda} needs "
            f"({SKIP_DRIVER_ENV}=1: for nodes that run a newer CUDA on an older driver through NVIDIA's "
            "CUDA forward-compatibility libraries)"
        )
    series = int(driver.split(".")[0])
    if series < need:
        raise ConfigError(
            f"NVIDIA driver {driver} is too old for torch's CUDA {cuda}, which needs the R{need} series "
            f"or newer: ask your admins for a driver >= {need}, or install a torch built for an older "
            "CUDA (docs/running.md#the-gpu-environment)."
        )
    return f"driver: NVIDIA {driver} (R{need}+ needed for CUDA {cuda}): ok"


def preflight(cfg: DictConfig) -> list[str]:
    """platform=gpu in the driver before Ray starts (recipes.train, through the platform registry):
    the actor's attention, then the NVIDIA driver against torch's CUDA; the lines the console says."""
    notes = [resolve_attention(cfg)]
    driver = driver_version()
    # a driver process off the GPU nodes (RAY_ADDRESS): train.sbatch checks every node itself
    if driver is not None or not os.environ.get("RAY_ADDRESS"):
        notes.append(check_driver(driver, torch_cuda()))
    return [n for n in notes if n]


# ------------------------------------------------------------------------------------ offline
def env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def is_hub_id(path: str) -> bool:
    """A model path that names a Hub repository (ORG/NAME), not a folder (recipes.checks' rule)."""
    return not (Path(path).expanduser().exists() or path.startswith(("/", ".", "~")) or path.count("/") != 1)


def hub_cache() -> Path:
    """The Hugging Face cache's hub folder: $HF_HUB_CACHE, else $HF_HOME/hub (read at import)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def hub_snapshot(repo_id: str, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The folder of `repo_id`'s snapshot (revision main) in the Hugging Face cache when it holds a
    whole model: config.json, the tokenizer's config and every weight file (each shard that a
    safetensors or PyTorch index names). None when any is missing: a config fetched alone (as
    recipes.checks does) is not a model."""
    from huggingface_hub import try_to_load_from_cache

    def cached(name: str) -> Path | None:
        got = try_to_load_from_cache(repo_id, name, cache_dir=cache_dir)
        return Path(got) if isinstance(got, str) else None

    config = cached("config.json")
    if config is None or cached("tokenizer_config.json") is None:
        return None
    for index, single in (
        ("model.safetensors.index.json", "model.safetensors"),
        ("pytorch_model.bin.index.json", "pytorch_model.bin"),
    ):
        index_file = cached(index)
        if index_file is not None:
            try:
                shards = set(json.loads(index_file.read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return None
            return config.parent if shards and all(cached(s) is not None for s in shards) else None
        if cached(single) is not None:
            return config.parent
    return None


def hub_reachable(endpoint: str | None = None, timeout: float = 5.0) -> bool:
    """Whether this node gets an answer from the Hub (any HTTP status counts). False without
    asking when HF_HUB_OFFLINE is set: the user has said there is no network."""
    if env_true("HF_HUB_OFFLINE"):
        return False
    import http.client
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(
            urllib.request.Request(endpoint or hub_endpoint(), method="HEAD"), timeout=timeout
        ).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError, http.client.HTTPException):  # no route, refused, timeout, bad URL
        return False
    return True


def data_hint(folder: Path) -> str:
    """The command that writes a dataset's folder (`$RECIPES_CACHE/data/<name>`)."""
    name = folder.name
    if name.endswith("_rephrased"):
        base = folder.parent / name.removesuffix("_rephrased")
        return (
            f"python -m recipes.tools.data prepare {base.name} --out {base}, then python -m recipes.tools.rephrase "
            f"--input {base / 'train.parquet'} --output {folder / 'train.parquet'} ... (docs/rephrase.md)"
        )
    return f"python -m recipes.tools.data prepare {name} --out {folder}"


def missing_data(files: Sequence[str | os.PathLike]) -> list[str]:
    """One phrase per dataset folder that lacks one of `files`, with the command that writes it."""
    absent: dict[Path, list[str]] = {}
    for f in dict.fromkeys(Path(f) for f in files):
        if not f.is_file():
            absent.setdefault(f.parent, []).append(f.name)
    return [f"no {' or '.join(names)} in {folder} ({data_hint(folder)})" for folder, names in absent.items()]


@dataclass(frozen=True)
class Inputs:
    """What a run reads from disk, and whether it is all here. `missing`: what the run cannot get
    by itself, each with the command that fetches it; `download`: hub ids not in the cache, which
    the run downloads when the Hub answers (`reachable`, asked only then)."""

    model: str
    snapshot: Path | None
    data: tuple[Path, ...]
    missing: tuple[str, ...] = ()
    download: tuple[str, ...] = ()
    reachable: bool | None = None

    @property
    def offline(self) -> bool:
        """Everything is here: HF_HUB_OFFLINE=1 is safe."""
        return not self.missing and not self.download

    @property
    def ok(self) -> bool:
        """The run can start: everything is here, or what is not can be downloaded now."""
        return not self.missing and (not self.download or bool(self.reachable))

    def line(self) -> str:
        """One line: `offline: ...`, `online: ...` (something will be downloaded), or the problem."""
        if self.offline:
            where = (
                f"model {self.model} from the Hugging Face cache, {self.snapshot}"
                if is_hub_id(self.model)
                else f"model {self.snapshot}"
            )
            data = ", ".join(str(f) for f in self.data)
            return (
                f"offline: everything the run reads is here ({where}; data {data}): "
                "HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1"
            )
        ids = ", ".join(self.download)
        fetch = " && ".join(f"hf download {m}" for m in self.download)
        if self.ok:
            return (
                f"online: {ids} not in the Hugging Face cache ({hub_cache()}), so the run downloads it from "
                f"{hub_endpoint()} and HF_HUB_OFFLINE stays unset (for nodes without network, fetch it "
                f"beforehand: {fetch})"
            )
        problems = list(self.missing)
        if self.download:
            why = (
                "HF_HUB_OFFLINE is set"
                if env_true("HF_HUB_OFFLINE")
                else f"this node cannot reach {hub_endpoint()}"
            )
            problems.append(
                f"{ids} not in the Hugging Face cache ({hub_cache()}) and {why}: fetch it beforehand on a "
                f"machine with network, with the same HF_HOME: {fetch}"
            )
        return "; ".join(problems)


def inputs(
    model: str,
    data_files: Sequence[str | os.PathLike],
    reachable: Callable[[], bool] = hub_reachable,
    model_hint: str = "",
) -> Inputs:
    """What a run of `model` on `data_files` reads, and whether it is here (`Inputs`). A missing
    local folder cannot be downloaded (`model_hint`: the command that fills it)."""
    missing, download, snapshot = [], [], None
    if is_hub_id(model):
        snapshot = hub_snapshot(model)
        if snapshot is None:
            download.append(model)
    else:
        folder = Path(model).expanduser()
        if (folder / "config.json").is_file():
            snapshot = folder
        else:
            missing.append(f"no model at {folder}" + (f" ({model_hint})" if model_hint else ""))
    files = tuple(dict.fromkeys(Path(f) for f in data_files))
    missing += missing_data(files)
    return Inputs(
        model,
        snapshot,
        files,
        tuple(missing),
        tuple(download),
        reachable() if download else None,
    )


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m recipes.platforms.gpu",
        description="driver: check that this node's NVIDIA driver is new enough for torch's CUDA, in one line "
        f"({SKIP_DRIVER_ENV}=1 skips the version comparison, for CUDA forward compatibility). Whether a run's "
        "model and data are all here: python -m recipes.offline OVERRIDES...",
        epilog="exit status: 0 ok; 2 the driver is too old, or no driver or no CUDA torch here (one line saying which)",
    )
    p.add_argument("command", choices=["driver"])
    p.parse_args(argv)
    try:
        print(check_driver(driver_version(), torch_cuda()), flush=True)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
