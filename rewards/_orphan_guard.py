"""Grading processes die with the process that grades, even when it dies by SIGKILL (Ray kills
actors that way at shutdown; the OOM killer and Slurm preemption do too).

The pool's workers are forked by multiprocessing's forkserver, itself a child of the grading
process. Two links, one per generation:

- the forkserver imports this module (the pool's forkserver preload): a thread polls its parent
  pid and ends the forkserver when the parent is gone (it is idle in `select`, so the thread
  runs);
- each worker (`worker_init`, the pool's initializer) asks Linux for SIGKILL when its parent,
  the forkserver, exits (`prctl(PR_SET_PDEATHSIG)`): a worker stuck inside a verification that
  holds the GIL in C code cannot run a thread of its own, but a signal from the kernel needs
  none.

So a worker outlives its grading process by at most POLL_S. Elsewhere than Linux the workers
have no such link, and the pool's own shutdown is the only cleanup.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

POLL_S = 0.5
_PR_SET_PDEATHSIG = 1


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(0)


def worker_init() -> None:
    """In each pool worker: SIGKILL when the forkserver (the parent) exits."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent or parent == 1:  # the parent died before the request took effect
        os._exit(0)


def _start_in_forkserver() -> None:
    """Only when multiprocessing's forkserver preloads this module: the grading process imports
    it too (for worker_init), and must not exit with its own parent."""
    frame = sys._getframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(
            os.path.join("multiprocessing", "forkserver.py")
        ):
            threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
            return
        frame = frame.f_back


_start_in_forkserver()
