"""Device memory of each phase of a training step, written where `RECIPES_MEMORY_LOG` points.

For measuring runs only (the bare-GPU check, scripts/gpu_bundle/bare_check.py): with the variable
unset nothing is patched. With it set, recipes/extensions/plugins.py wraps three methods of verl's
trainer worker (`ActorRolloutRefWorker`, so ProRL's subclass too), and the transformers rollout
(recipes/platforms/hf_rollout.py) reports each decode batch. One JSON line per call:

  {"phase": "ref log-prob" | "old log-prob" | "update" | "generation",
   "pid": ..., "device": "cuda" | "cpu",
   "before": bytes torch had allocated when the call began (for the first phase after a rollout:
             what the trainer held on the device while the rollout ran),
   "peak": torch's largest allocation during the call, "reserved": its largest reservation,
   "rss": the process's resident memory after the call (bytes)}

On a CPU torch keeps no allocation counts, so before, peak and reserved are 0 and rss is what there
is. `update` is one call per mini-batch.
"""

from __future__ import annotations

import functools
import json
import os

ENV = "RECIPES_MEMORY_LOG"
# verl's worker method -> the phase it is
WORKER_PHASES = {
    "compute_ref_log_prob": "ref log-prob",
    "compute_log_prob": "old log-prob",
    "update_actor": "update",
}


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def write(phase: str, device: str, before: int, peak: int, reserved: int) -> None:
    import psutil

    line = {
        "phase": phase,
        "pid": os.getpid(),
        "device": device,
        "before": int(before),
        "peak": int(peak),
        "reserved": int(reserved),
        "rss": int(psutil.Process().memory_info().rss),
    }
    with open(os.environ[ENV], "a") as f:  # one short line per write: appends do not interleave
        f.write(json.dumps(line) + "\n")


def measured(call, phase: str):
    """`call` wrapped: torch's peak device memory is reset before it and written after it."""

    @functools.wraps(call)
    def wrapped(*args, **kwargs):
        import torch

        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        before = 0
        if cuda:
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        out = call(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
            write(phase, "cuda", before, torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
        else:
            write(phase, "cpu", 0, 0, 0)
        return out

    return wrapped


def patch_worker() -> None:
    from verl.workers.engine_workers import ActorRolloutRefWorker

    for name, phase in WORKER_PHASES.items():
        setattr(ActorRolloutRefWorker, name, measured(getattr(ActorRolloutRefWorker, name), phase))


# verl's module -> the patch to apply once a process has imported it (recipes/extensions/plugins.py),
# only where RECIPES_MEMORY_LOG is set
PATCHES = {"verl.workers.engine_workers": patch_worker}
