"""Each run's weight-sync sockets in its own Ray session folder (a fix of verl 0.9.1, on every platform).

After each step verl hands the new weights from every trainer rank to the vLLM worker beside it
through a ZMQ socket, which it names /tmp/rl-colocate-zmq-<Ray job id>-replica-<r>-rank-<k>.sock.
Two faults follow:

- The job id is meant to keep runs apart, but a run that starts a Ray cluster of its own (every
  `python -m recipes.train` without a cluster to join) is the first job of that cluster,
  01000000, in every run. Two runs on one machine whose weight syncs fall in the same second bind
  the same path: one run's vLLM worker reads the other's trainer, and a run waits forever in its
  sync. Two test launches side by side hung so: one after its step 3, the other having synced its
  step 1 a quarter of a second earlier.
- verl removes the socket when a sync ends, but a run killed during a sync (`scancel`, a time
  limit, a lost node) leaves it in /tmp, one per rank, beside every other run's files.

Here the socket is `<Ray's sockets folder>/wsync-<node>-<r>-<k>.sock`: in the session folder of
the run's own Ray cluster (where Ray keeps its own sockets, e.g. /tmp/ray/session_<time>_<pid>/
sockets/), named after the Ray node (a random id for each node of each cluster: two Ray nodes of
one cluster may share a host and a session folder). Both ends are renamed: the trainer rank
(verl's `ServerAdapter`, in the actor's worker) and the vLLM workers, whose server
(`vLLMHttpServer`, a Ray actor of the same node) hands them the name's stem in
RECIPES_WEIGHT_SYNC_STEM. recipes/extensions/plugins.py applies `PATCHES` in every process that imports
those modules.
"""

from __future__ import annotations

import functools
import os
import re

# verl's name: ipc:///tmp/rl-colocate-zmq-<job id>-replica-<r>-rank-<k>.sock
VERL_NAME = re.compile(r"^ipc:///tmp/rl-colocate-zmq-.+-replica-(\d+)-rank-(\d+)\.sock$")
STEM_ENV = "RECIPES_WEIGHT_SYNC_STEM"
UNIX_PATH_MAX = 107  # bytes of a Unix socket's path (Linux's 108, less the final NUL)


def stem() -> str:
    """This Ray node's stem of a socket path: <its sockets folder>/wsync-<node id>."""
    import ray
    from ray._private import worker

    node = ray.get_runtime_context().get_node_id()[:8]
    return f"{worker.global_worker.node.get_sockets_dir_path()}/wsync-{node}"


def rename(handle: str, stem: str) -> str:
    """verl's socket `handle` -> the same replica's and rank's socket under `stem`."""
    found = VERL_NAME.match(handle)
    if not found:  # verl renamed it: fail here, not in a silent hang later
        raise RuntimeError(f"verl's weight-sync socket {handle} is not named as verl 0.9.1 names it")
    path = f"{stem}-{found[1]}-{found[2]}.sock"
    if len(path.encode()) > UNIX_PATH_MAX:
        raise RuntimeError(
            f"the weight-sync socket {path} is longer than a Unix socket path may be "
            f"({UNIX_PATH_MAX} bytes): start Ray with a shorter --temp-dir"
        )
    return f"ipc://{path}"


def _after(cls: type, name: str, then) -> None:
    method = getattr(cls, name)

    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        return then(self, method(self, *args, **kwargs))

    setattr(cls, name, wrapped)


def patch_sender() -> None:
    """The trainer's end: the adapter's socket renamed once it is built."""
    from verl.workers.rollout.vllm_rollout.vllm_rollout import ServerAdapter

    def adapter_built(adapter, _) -> None:
        adapter.zmq_handle = rename(adapter.zmq_handle, stem())

    _after(ServerAdapter, "__init__", adapter_built)


def patch_server() -> None:
    """The vLLM server hands this node's stem to the vLLM workers it starts."""
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    _after(vLLMHttpServer, "__init__", lambda _server, _: os.environ.__setitem__(STEM_ENV, stem()))


def patch_receiver() -> None:
    """The vLLM worker's end: the socket it connects to, renamed with its server's stem."""
    from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

    def named(_extension, handle: str) -> str:
        if STEM_ENV not in os.environ:
            raise RuntimeError(
                f"this vLLM worker's server did not set {STEM_ENV} (recipes/platforms/weight_sync.py)"
            )
        return rename(handle, os.environ[STEM_ENV])

    _after(vLLMColocateWorkerExtension, "_get_zmq_handle", named)


# verl's module -> the patch to apply once a process has imported it (recipes/extensions/plugins.py)
PATCHES = {
    "verl.workers.rollout.vllm_rollout.vllm_rollout": patch_sender,
    "verl.workers.rollout.vllm_rollout.vllm_async_server": patch_server,
    "verl.workers.rollout.vllm_rollout.utils": patch_receiver,
}
