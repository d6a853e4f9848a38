"""What verl must find registered in every one of its processes (driver, task runner, actor and
rollout workers, reward loop), loaded through our `verl.plugins` entry point on `import verl`:

  platform "cpu"          recipes/platforms/cpu_device.py (blockers 3 and 8 of docs/cpu_platform.md)
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
  each method's policy losses and advantage estimators: the module and names its declaration
                          lists (recipes/methods/manifest.py, `registers`), imported after the verl
                          module that holds the registry
(A method's workers, swapped in by recipes_sync, are not a registry: Ray finds them by name.)

Why this module imports the platform first: it must be registered before anything asks verl for
its platform, and the entry point is the one module that runs first whichever of our modules a
process imports first. (If a process imports, say, recipes.extensions.trainer before verl, verl loads this
plugin in the middle of that import; the platform is registered here, and recipes.extensions.trainer
finishes its own registration afterwards. If it imports this module, or recipes.platforms.cpu_device,
first, verl sees it half-imported, does nothing, and that module completes normally, registering
the platform before verl is asked for it.) verl swallows a plugin's
import error at DEBUG level: `check_verl_seam` and `check_method_names` say in one line what is
missing, and recipes.train runs them before Ray starts, the second in a fresh interpreter, as a
worker starts (recipes/verl_seam.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable

from recipes.methods import manifest  # what each method registers with verl (imports nothing of ours)
from recipes.platforms.cpu_vllm import patch_vllm_version

patch_vllm_version()

from recipes.platforms import cpu_device  # noqa: E402, F401  verl's platform "cpu", registered on import


class _AfterImport(importlib.abc.MetaPathFinder):
    """Post-import hooks: for each `(name, then)` of `hooks`, `then()` runs right after the process
    has executed verl's module `name` (at once if verl imported it before loading this plugin);
    several hooks on one module run in the order listed. A registration is thus made when the
    process imports the registry it goes into, and a process that uses none (a TransferQueue or
    storage actor, a test interpreter) does not import verl's trainer, agent loop and workers for
    it: loading this plugin imports none of them, so `import verl` costs what it costs without it."""

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


# (verl's module, what to do once a process has imported it): our registrations, each a module that
# registers with verl at import, the methods' read from their declarations ...
AFTER_IMPORT: list[tuple[str, Callable[[], object]]] = [
    ("verl.experimental.agent_loop", _importer("recipes.extensions.agent_loop")),  # the agent loop registry
    (
        "verl.experimental.reward_loop.reward_manager",
        _importer("recipes.extensions.reward_manager"),
    ),  # reward managers
    *((verl_module, _importer(ours)) for verl_module, ours in manifest.wiring()),  # losses, estimators
    ("verl.trainer.ppo.v1", _importer("recipes.extensions.trainer")),  # trainers
]
from recipes.extensions import on_policy  # noqa: E402  ... a fix of verl's weight sync, the on-policy loss
from recipes.platforms import hf_rollout, weight_sync  # noqa: E402
from recipes.platforms.registry import in_process  # noqa: E402

AFTER_IMPORT += [*weight_sync.PATCHES.items(), *on_policy.PATCHES.items(), *hf_rollout.PATCHES.items()]
AFTER_IMPORT += in_process().patches.items()  # ... and the platform's (VERL_PLATFORM=cpu: the CPU patches)
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
    """verl loads this plugin at DEBUG level and hides its import errors: say in one sentence, before
    Ray starts, if verl's version or any of our registrations that are not a method's is wrong.
    (The methods' names are checked where they could be missing: `check_method_names`.)"""
    import verl

    if verl.__version__ != VERL_VERSION:
        raise SeamError(
            f"verl {verl.__version__} is installed; this project extends verl {VERL_VERSION} "
            f"(pip install verl=={VERL_VERSION}, or `make setup`)"
        )
    missing = [name for name, ok in _ours_registered().items() if not ok]
    if missing:
        raise SeamError(
            f"verl {verl.__version__} did not register our {', '.join(missing)}: "
            "is this package installed (pip install -e .) so verl finds its `verl.plugins` entry point?"
        )


def check_method_names(expected: list[tuple[str, str, str]] | None = None) -> None:
    """Every name a method registers with verl is in verl's registry once this process has imported
    the verl module that holds it, said in one sentence. `expected`: (verl registry, name, method)
    triples (default: the declarations, recipes/methods/manifest.py). Meant for a fresh interpreter
    that has imported nothing but verl, as a Ray worker (recipes/verl_seam.py): a process
    that imported the registry of methods has every method's names whatever the plugin does."""
    absent, modules = [], []
    for registry, name, method in manifest.expected_names() if expected is None else expected:
        where = manifest.VERL_REGISTRIES[registry]
        if name not in getattr(importlib.import_module(where.module), where.attribute):
            absent.append(f"{where.what} {name!r} of method {method}")
            modules += [where.module] if where.module not in modules else []
    if absent:
        raise SeamError(
            f"a verl process that imports {', '.join(modules)} does not get the {', '.join(absent)}: our plugin "
            "imports a method's module there only for what recipes/methods/manifest.py declares it registers "
            "(`registers`), and the module must register those names when imported (docs/adding_a_method.md)"
        )


def _ours_registered() -> dict[str, bool]:
    """Each registration of ours that is not a method's: whether this process has it."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from recipes.extensions.agent_loop import AGENT_NAME

    try:
        get_trainer_cls("recipes_sync")
        has_trainer = True
    except Exception:  # noqa: BLE001 - any failure means it is not there
        has_trainer = False
    return {
        "reward manager 'math_pool'": "math_pool" in REWARD_MANAGER,
        f"agent loop {AGENT_NAME!r}": AGENT_NAME in _agent_loop_registry,
        "trainer 'recipes_sync'": has_trainer,
        f"rollout {hf_rollout.NAME!r}": hf_rollout.NAME in RolloutReplicaRegistry._registry
        and (hf_rollout.NAME, "async") in _ROLLOUT_REGISTRY,
    }
