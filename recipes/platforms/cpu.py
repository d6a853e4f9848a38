"""verl's real trainer on a CPU: the shims it needs besides the platform and the vLLM rollout.

verl 0.9.1 has no CPU device and no CPU rollout backend; with no GPU it assumes CUDA. This module,
the platform in recipes/extensions/plugins.py and the vLLM shims in recipes/platforms/cpu_vllm.py get its V1 PPO trainer
(FSDP2 actor, vLLM rollout server, agent loop, reward loop, TransferQueue) running on a CPU with a
small model, without editing verl's files. `platform=cpu` (configs/platform/cpu.yaml) turns it on;
the training entry point sets the environment below.

What it takes, and why (docs/cpu_platform.md tells the story):

 1. TransferQueue wants ~10 one-CPU Ray actors: config `ray_init.num_cpus=32`, one storage unit.
 2. The resource pool asks Ray for GPUs: config `ray_init.num_gpus=1`, a logical slot.
 3. No CPU platform, so NCCL: `PlatformCPU` in recipes/extensions/plugins.py (device "cpu", gloo), chosen by
    `VERL_PLATFORM=cpu`.
 4. Training engines are registered for cuda only: `VERL_ENGINE_DEVICE=cuda
    VERL_ENGINE_VENDOR=nvidia` (verl's FSDP engine itself runs on any torch device).
 5. FlashAttention2 by default: config `attn_implementation=sdpa`.
 6. FSDP1 needs an accelerator: config `strategy=fsdp2`, no torch.compile.
 7. Rollouts only through vLLM/SGLang/TRT-LLM: vLLM's CPU build runs verl's own vLLM rollout,
    with the shims of recipes/platforms/cpu_vllm.py.
 8. torch.cuda memory/FLOPs/RNG utilities: `_CPUDeviceModule` (recipes/extensions/plugins.py), torch.cpu
    plus no-op memory queries, a device name, and the CPU generator's state for checkpoints.
 9. `current_device()` as an int means an accelerator index to torch: the platform returns
    "cpu", as `torch.cpu.current_device()` does.
10. The forward-only reference model is offloaded with pinned memory: `patch_offload_policy`.
11. The process-group backend "cpu:gloo,<device>:<backend>" becomes "cpu:gloo,cpu:gloo", which
    torch rejects: `patch_process_group`.
12. Dataloader worker processes are killed noisily at exit: config `dataloader_num_workers=0`.
13. verl's FSDP engine computes in `fsdp_config.mixed_precision.param_dtype`, bf16 unless set
    (FSDP2 casts the gathered weights to it and the forward autocasts to it): config
    `mixed_precision` fp32 for the actor and the reference. On CPUs without AMX or AVX512-BF16
    (most laptops and CI runners) bf16 matmul is ~90x slower than float32; `check_precision`
    allows bf16 only where the CPU has it, as an opt-in, and the run line names the precision.

All of this touches verl internals, which is why verl is pinned exactly;
tests/test_cpu_platform.py fails loudly when an upgrade breaks any of it.

Our `verl.plugins` entry point (recipes/extensions/plugins.py) applies the patches in every Ray process, as
soon as the process imports the verl module each one patches. Registering the "cpu" platform changes
nothing on GPU machines: it is only chosen when `VERL_PLATFORM=cpu`.
"""

from __future__ import annotations

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
