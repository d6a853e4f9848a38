"""Tasks that tests/test_hostile.py runs in the grader's worker processes (tests/ is on their path):
each kills the worker it runs on from inside the task, as the OOM killer or an operator's `kill -9`
does, so a test needs no knowledge of which worker took which task."""

import os
import signal


def die_in_task(log: str) -> None:
    """Append this worker's PID to `log`, then SIGKILL this worker: every attempt dies."""
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)


def die_in_first_attempt(log: str) -> int:
    """The first attempt writes its worker's PID to `log` and dies like die_in_task; a later attempt
    returns its own worker's PID."""
    try:
        with open(log, "x") as f:
            f.write(f"{os.getpid()}\n")
    except FileExistsError:
        return os.getpid()
    os.kill(os.getpid(), signal.SIGKILL)
    return -1  # never reached
