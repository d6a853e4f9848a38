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

    python -m recipes.platforms.gpu driver     # one line; exit 2 when the driver is too old
"""

from __future__ import annotations

import shutil
import subprocess
import sys
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


def check_driver(driver: str | None, cuda: str | None) -> str:
    """One line saying the driver fits torch's CUDA; raises ConfigError naming the driver found,
    the one needed and what to do."""
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
    series = int(driver.split(".")[0])
    if series < need:
        raise ConfigError(
            f"NVIDIA driver {driver} is too old for torch's CUDA {cuda}, which needs the R{need} series "
            f"or newer: ask your admins for a driver >= {need}, or install a torch built for an older "
            "CUDA (docs/running.md#the-gpu-environment)."
        )
    return f"driver: NVIDIA {driver} (R{need}+ needed for CUDA {cuda}): ok"


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m recipes.platforms.gpu",
        description="driver: check that this node's NVIDIA driver is new enough for torch's CUDA, in one line.",
        epilog="exit status: 0 it is; 2 it is not, or no driver or no CUDA torch here (one line saying which)",
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
