"""Two runs on one machine must not share a weight-sync socket (a fix of verl 0.9.1, on every platform).

After each step verl hands the new weights from every trainer rank to the vLLM worker beside it
through a ZMQ socket at /tmp/rl-colocate-zmq-<Ray job id>-replica-<r>-rank-<k>.sock. The job id
is meant to keep runs apart, but a run that starts a Ray cluster of its own (every
`python -m recipes.train` without a cluster to join, every Slurm job here) is the first job of
that cluster, 01000000, in every run. Two runs on one machine whose weight syncs fall in the same
second bind the same path: one run's vLLM worker reads the other's trainer, and a run waits
forever in its sync. Two test launches side by side hung so: one after its step 3, the other
having synced its step 1 a quarter of a second earlier.

The fix adds the Ray node id (random for each node of each cluster) to the job id in the socket's
name, at both ends: the trainer rank (verl's `ServerAdapter`, in the actor's worker) and the
vLLM server of the same machine (`vLLMHttpServer`, which hands the id to its vLLM workers in
VERL_RAY_JOB_ID). recipes/plugins.py applies `PATCHES` in every process that imports those modules.
"""

from __future__ import annotations

import functools
import os


def run_id() -> str:
    """The Ray job id and this node's id: the same at both ends of a sync, different in another run."""
    import ray

    context = ray.get_runtime_context()
    return f"{context.get_job_id()}-{context.get_node_id()[:12]}"


def _after_init(cls: type, then) -> None:
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        then(self)

    cls.__init__ = __init__


def patch_sender() -> None:
    """The trainer's end: the socket named by run id, where verl puts the job id."""
    import ray
    from verl.workers.rollout.vllm_rollout.vllm_rollout import ServerAdapter

    def rename(adapter) -> None:
        job = f"-zmq-{ray.get_runtime_context().get_job_id()}-"
        if job not in adapter.zmq_handle:  # verl moved it: fail here, not in a silent hang later
            raise RuntimeError(f"verl's weight-sync socket {adapter.zmq_handle} has no {job!r}")
        adapter.zmq_handle = adapter.zmq_handle.replace(job, f"-zmq-{run_id()}-", 1)

    _after_init(ServerAdapter, rename)


def patch_receiver() -> None:
    """The vLLM end: its workers name the socket after VERL_RAY_JOB_ID, which verl sets here."""
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    _after_init(vLLMHttpServer, lambda server: os.environ.__setitem__("VERL_RAY_JOB_ID", run_id()))


# verl's module -> the patch to apply once a process has imported it (recipes/plugins.py)
PATCHES = {
    "verl.workers.rollout.vllm_rollout.vllm_rollout": patch_sender,
    "verl.workers.rollout.vllm_rollout.vllm_async_server": patch_receiver,
}
