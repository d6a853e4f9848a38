"""verl's platform "cpu" (blockers 3 and 8 of docs/cpu_platform.md#the-rest-of-verl-on-a-cpu): device
"cpu", collectives over gloo, no-op memory queries, and `torch.cpu` answering what verl asks of
`torch.cuda`.

Registered with verl's `PlatformRegistry` when this module is imported, which our `verl.plugins`
entry point (recipes/extensions/plugins.py) does first thing in every verl process, on every
platform; verl picks it only where VERL_PLATFORM=cpu (`is_platform_available` is False), which
`platform=cpu` exports (recipes/platforms/cpu.py, `CPU_ENV`). What verl's `PlatformBase` must still
declare for this class to be complete is listed in docs/verl_contract.md.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


class _CPUDeviceModule(types.ModuleType):
    """`torch.cpu` plus what verl calls on `torch.cuda` for memory logging and FLOPs (blocker 8)."""

    def __init__(self) -> None:
        super().__init__("torch_cpu_shim")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def _zero(*_args: Any, **_kwargs: Any) -> int:
        return 0

    memory_allocated = memory_reserved = max_memory_allocated = max_memory_reserved = _zero

    @staticmethod
    def mem_get_info(*_args: Any, **_kwargs: Any) -> tuple[int, int]:
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total

    @staticmethod
    def get_device_name(*_args: Any, **_kwargs: Any) -> str:
        return "CPU"

    @staticmethod
    def reset_peak_memory_stats(*_args: Any, **_kwargs: Any) -> None:
        return None

    empty_cache = synchronize = reset_peak_memory_stats

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"  # as torch.cpu.current_device(); verl passes it to .to(device=...)

    @staticmethod
    def set_device(*_args: Any, **_kwargs: Any) -> None:
        return None

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed
    # verl's checkpoint restores the "device" RNG from the state saved under the device name,
    # which on this platform is the CPU generator's own state.
    get_rng_state = staticmethod(torch.get_rng_state)
    set_rng_state = staticmethod(torch.set_rng_state)


_DEVICE_MODULE = _CPUDeviceModule()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl platform for a machine with no accelerator: device "cpu", collectives over gloo."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: chosen only by VERL_PLATFORM=cpu

    def current_device(self) -> str:
        return "cpu"  # as torch.cpu.current_device(); an int would mean an accelerator index

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    def ray_resource_name(self) -> str:
        return "GPU"  # blocker 2: verl's resource pool asks for GPUs; platform=cpu gives Ray logical ones

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        return {}

    def get_collective_module(self) -> Any:
        return None

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def cudart(self) -> Any:
        return None
