"""Grading processes die with the process that grades, even when it dies by SIGKILL (Ray kills
actors that way at shutdown; the OOM killer and Slurm preemption do too).

The pool's workers are forked by multiprocessing's forkserver, itself a child of the grading
process. Two links, one per generation:

- the forkserver imports this module (the pool's forkserver preload, its only importer): a
  thread polls its parent pid and ends the forkserver when the parent is gone (it is idle in
  `select`, so the thread runs);
- each worker (`rewards._mathverify.worker_init`, the pool's initializer) asks Linux for SIGKILL
  when its parent, the forkserver, exits (`prctl(PR_SET_PDEATHSIG)`): a worker stuck inside a
  verification that holds the GIL in C code cannot run a thread of its own, but a signal from
  the kernel needs none.

So a worker outlives its grading process by at most POLL_S. Elsewhere than Linux the workers
have no such link, and the pool's own shutdown is the only cleanup.
"""

from __future__ import annotations

import os
import threading
import time

POLL_S = 0.5


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(0)


threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
