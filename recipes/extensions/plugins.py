"""What verl must find registered in every one of its processes (driver, task runner, actor and
rollout workers, reward loop), loaded through our `verl.plugins` entry point on `import verl`:

  platform "cpu"          defined here (blockers 3 and 8 of docs/cpu_platform.md)
  vLLM's CPU build answering for "vllm"  recipes/platforms/cpu_vllm.py (first, before verl imports vLLM)
  deterministic kernels   recipes/platforms/determinism.py (when recipes.train exported RECIPES_DETERMINISTIC=1)
and, once the process imports the verl module they extend (`AFTER_IMPORT` below):
  CPU patches             recipes/platforms/cpu.py (when VERL_PLATFORM=cpu)
  weight-sync sockets per run  recipes/platforms/weight_sync.py (in the run's Ray session folder)
  rollout "hf" (no vLLM; the bare-GPU check)  recipes/platforms/hf_rollout.py
  memory per phase (when RECIPES_MEMORY_LOG is set)  recipes/platforms/memory_probe.py
  PPO loss on on-policy updates  recipes/extensions/on_policy.py (old = current.detach(), no extra pass)
  trainer "recipes_sync"  recipes/extensions/trainer.py
  reward "math_pool"      recipes/extensions/reward_manager.py
  agent loop "recipes_prompt_variants"  recipes/extensions/agent_loop.py
  policy losses "cw_grpo[-seqlogp][-allpos][-grad]"  recipes/methods/cw_grpo.py
  worker ProRLWorker (not a registry: recipes_sync swaps it in)  recipes/methods/prorl.py

Why the platform lives in this module: it must be registered before anything asks verl for its
platform, and the entry point is the one module that runs first whichever of our modules a
process imports first. (If a process imports, say, recipes.extensions.trainer before verl, verl loads this
plugin in the middle of that import; the platform is registered here, and recipes.extensions.trainer
finishes its own registration afterwards. If it imports this module first, verl sees it
half-imported, does nothing, and this module completes normally.) verl swallows a plugin's
import error at DEBUG level: tests/test_cpu_platform.py checks in fresh interpreters that every
name is registered.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from recipes.platforms.cpu_vllm import patch_vllm_version

patch_vllm_version()

from verl.plugin.platform.platform_base import PlatformBase  # noqa: E402
from verl.plugin.platform.platform_manager import PlatformRegistry  # noqa: E402


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


class _AfterImport(importlib.abc.MetaPathFinder):
    """Post-import hooks: for each `(name, then)` of `hooks`, `then()` runs right after the process
    has executed verl's module `name` (at once if verl imported it before loading this plugin);
    several hooks on one module run in the order listed. A registration is thus made when the
    process imports the registry it goes into, and a process that uses none (a TransferQueue or
    storage actor, a test interpreter) does not import verl's trainer, agent loop and workers for
    it: `import verl` with VERL_PLATFORM=cpu takes 4.5 s on 2 cores, as without the plugin, against
    9.1 s when every registration was made up front."""

    def __init__(self, hooks: list[tuple[str, Callable[[], object]]]) -> None:
        self.hooks: dict[str, list[Callable[[], object]]] = {}
        for name, then in hooks:
            self.hooks.setdefault(name, []).append(then)

    def install(self) -> None:
        sys.meta_path.insert(0, self)
        for name in [n for n in self.hooks if n in sys.modules]:  # imported before this plugin
            for then in self.hooks.pop(name):
                then()

    def find_spec(self, name, path=None, target=None):
        if name not in self.hooks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, self.hooks.pop(name))
        return spec


class _ThenLoader(importlib.abc.Loader):
    """`loader`, then each of `then` once the module has executed."""

    def __init__(self, loader, then: list[Callable[[], object]]) -> None:
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        for then in self.then:
            then()

    def __getattr__(self, name: str):  # get_source, get_resource_reader, ...: the real loader's
        return getattr(self.loader, name)


def _importer(module: str) -> Callable[[], object]:
    return lambda: importlib.import_module(module)


# (verl's module, what to do once a process has imported it): our registrations, a module that
# registers with verl at import (docs/adding_a_method.md) ...
AFTER_IMPORT: list[tuple[str, Callable[[], object]]] = [
    ("verl.experimental.agent_loop", _importer("recipes.extensions.agent_loop")),  # the agent loop registry
    (
        "verl.experimental.reward_loop.reward_manager",
        _importer("recipes.extensions.reward_manager"),
    ),  # reward managers
    ("verl.trainer.ppo.core_algos", _importer("recipes.methods.cw_grpo")),  # policy losses
    ("verl.trainer.ppo.v1", _importer("recipes.extensions.trainer")),  # trainers
]
from recipes.extensions import on_policy  # noqa: E402  ... a fix of verl's weight sync, the on-policy loss
from recipes.platforms import hf_rollout, weight_sync  # noqa: E402

AFTER_IMPORT += [*weight_sync.PATCHES.items(), *on_policy.PATCHES.items(), *hf_rollout.PATCHES.items()]
if os.environ.get("VERL_PLATFORM") == "cpu":  # ... and the CPU patches
    from recipes.platforms.cpu import PATCHES

    AFTER_IMPORT += PATCHES.items()
from recipes.platforms import memory_probe  # noqa: E402

if memory_probe.enabled():  # ... and, in a measuring run, the memory of each phase
    AFTER_IMPORT += memory_probe.PATCHES.items()

_AfterImport(AFTER_IMPORT).install()

from recipes.platforms import determinism  # noqa: E402

determinism.apply_in_process()  # recipes.deterministic: deterministic torch kernels in this process

VERL_VERSION = "0.9.1"  # pyproject pins it; the extension points above are this version's


class SeamError(RuntimeError):
    """verl is not the version we extend, or one of our registrations did not happen."""


def check_verl_seam() -> None:
    """verl loads this plugin at DEBUG level and hides its import errors: say in one sentence,
    before Ray starts, if verl's version or any of our registrations is wrong."""
    import verl

    if verl.__version__ != VERL_VERSION:
        raise SeamError(
            f"verl {verl.__version__} is installed; this project extends verl {VERL_VERSION} "
            f"(pip install verl=={VERL_VERSION}, or `make setup`)"
        )
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from recipes.extensions.agent_loop import AGENT_NAME
    from recipes.methods.cw_grpo import LOSSES

    try:
        get_trainer_cls("recipes_sync")
        has_trainer = True
    except Exception:  # noqa: BLE001 - any failure means it is not there
        has_trainer = False
    registered = {
        "reward manager 'math_pool'": "math_pool" in REWARD_MANAGER,
        f"agent loop {AGENT_NAME!r}": AGENT_NAME in _agent_loop_registry,
        **{f"policy loss {name!r}": name in POLICY_LOSS_REGISTRY for name in LOSSES},
        "trainer 'recipes_sync'": has_trainer,
        f"rollout {hf_rollout.NAME!r}": hf_rollout.NAME in RolloutReplicaRegistry._registry
        and (hf_rollout.NAME, "async") in _ROLLOUT_REGISTRY,
    }
    missing = [name for name, ok in registered.items() if not ok]
    if missing:
        raise SeamError(
            f"verl {verl.__version__} did not register our {', '.join(missing)}: "
            "is this package installed (pip install -e .) so verl finds its `verl.plugins` entry point?"
        )
