"""A quiet console for `python -m recipes.train`: everything verl, Ray and vLLM print (the resolved
config, warnings, progress bars, worker logs) goes to the run's log file; the console gets only what
`say` writes (what is run, the step table, validation results, the `done:` line).

    with quiet(log_path) as say:
        say("step ...")            # to the terminal
        print("noise")             # to log_path, as does anything a subprocess or Ray writes

`say` writes each line to the log as well, so the log holds everything the console showed (the step
table, the `done:` line) among verl's output: a run under nohup, tmux or Slurm is followed with
`tail -f <output_dir>/logs/<launch time>.log`. `-v` on the command line (recipes.verbose=true) leaves
the console as it is (the log then gets only `say`'s lines). Before the run's folder is known to be
wanted (a config error), the output is held in a scratch file and dropped unless asked for; a crash
keeps the file, which its message names.

A launch holds a lock on its log while it runs (`hold`): `live` tells a running launch from one
that stopped (killed, out of memory, out of time) without a word (python -m recipes.runs).

The step table: `follow` prints a row (`format_row`, under `header`) for each step verl's file
logger appends, with its validation results and the time left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

TAIL = 25  # lines of the log shown when the run fails


@contextlib.contextmanager
def quiet(
    log: Path, enabled: bool = True, expected: tuple[type[BaseException], ...] = ()
) -> Iterator[Callable[[str], None]]:
    """Send file descriptors 1 and 2 (this process and its children) to `log` and yield a function
    that prints to the terminal and appends the same line to `log`. On an exception other than
    `expected` ones (which explain themselves) the log gets a `failed:` line and its last lines
    are shown."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if not enabled:

        def tell(text: str) -> None:
            print(text, flush=True)
            append(log, text)

        try:
            yield tell
        except expected:
            raise
        except BaseException as exc:
            append(log, failure(exc))
            raise
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_out), "w", buffering=1)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    lock = threading.Lock()  # the step table's thread and the main thread both say

    def say(text: str) -> None:
        with lock:
            terminal.write(text + "\n")
            terminal.flush()
            append(log, text)

    failed = False
    try:
        yield say
    except expected:
        raise
    except BaseException as exc:
        failed = True
        append(log, failure(exc))
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        terminal.close()
        if failed:
            lines = log.read_text(errors="replace").splitlines()[-TAIL:]
            print(
                f"--- last {len(lines)} lines of {log}:", *lines, "---", sep="\n", file=sys.stderr, flush=True
            )


@contextlib.contextmanager
def held(enabled: bool = True, expected: tuple[type[BaseException], ...] = ()) -> Iterator[list[str]]:
    """`quiet` into a scratch file for output that has no run folder yet: the yielded list gets
    the text once the block ends (normally or not), and the file is removed, unless the block
    crashed (an exception not `expected`): the crash message names the file, so it stays."""
    fd, name = tempfile.mkstemp(prefix="recipes-", suffix=".log")
    os.close(fd)
    scratch, text, crashed = Path(name), [], False
    try:
        with quiet(scratch, enabled, expected):
            yield text
    except expected:
        raise
    except BaseException:
        crashed = enabled  # quiet's message names the scratch file: it stays for the reader
        raise
    finally:
        text.append(scratch.read_text(errors="replace"))
        if not crashed:
            scratch.unlink(missing_ok=True)


def failure(exc: BaseException) -> str:
    """The log's last word on a launch that crashed (recipes.runs shows it): `failed: Type: message`."""
    return f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}".rstrip(": ")


def append(log: Path, text: str) -> None:
    """One line at the end of `log` (O_APPEND: after whatever verl's processes wrote)."""
    with open(log, "a", encoding="utf-8", errors="replace") as f:
        f.write(text + "\n")


def hold(log: Path):
    """Lock `log` for as long as the returned file stays open (this process's life: keep it), and
    say in it which process on which machine holds it (`launch: pid N on HOST`). The file
    descriptor is not inherited by the processes this one starts, so the lock ends with the
    launch. None where the file system has no locks (recipes.runs then goes by the log's age)."""
    append(log, f"launch: pid {os.getpid()} on {socket.gethostname()}")
    f = open(log, "a")  # noqa: SIM115 - held open on purpose
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


def live(log: Path) -> bool | None:
    """Whether a launch holds `log` (`hold`); None where that cannot be told (no locks here)."""
    try:
        f = open(log, "rb")  # noqa: SIM115
    except OSError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        return False


# ------------------------------------------------------------------------------- step table
COLUMNS = [
    ("step", "step", "{:>4.0f}"),
    ("reward", "critic/score/mean", "{:>7.3f}"),
    ("acc", "grader/acc", "{:>6.3f}"),
    ("entropy", "actor/entropy", "{:>8.3f}"),
    ("resp_len", "response_length/mean", "{:>8.1f}"),
    ("grad_norm", "actor/grad_norm", "{:>9.3f}"),
    ("sec", "timing_s/step", "{:>6.1f}"),
]


ETA_WIDTH = 8


def format_row(step: int, data: dict, eta_s: float | None = None) -> str:
    cells = []
    for name, key, fmt in COLUMNS:
        value = step if name == "step" else data.get(key)
        width = len(fmt.format(0.0))
        cells.append(fmt.format(value) if isinstance(value, (int, float)) else "-".rjust(width))
    return " ".join([*cells, format_duration(eta_s).rjust(ETA_WIDTH)])


def header() -> str:
    return " ".join([*(name.rjust(len(fmt.format(0.0))) for name, _, fmt in COLUMNS), "eta".rjust(ETA_WIDTH)])


def format_duration(seconds: float | None) -> str:
    """45s, 12m05s, 3h07m; "-" when unknown."""
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def eta(step: int, total: int | None, step_seconds: list[float]) -> float | None:
    """Time left after `step` of `total`: the steps left times the median step of this launch,
    its first step left out when there are others (it includes vLLM's and the trainer's warm-up)."""
    if not total or not step_seconds:
        return None
    timed = sorted(step_seconds[1:] or step_seconds)
    return max(total - step, 0) * timed[len(timed) // 2]


def validation_lines(data: dict) -> list[str]:
    """The headline validation results of a step record (verl's val-core metrics), one a line."""
    return [f"  validation: {k} = {v:.4f}" for k, v in sorted(data.items()) if k.startswith("val-core/")]


def follow(path: Path, stop: threading.Event, say, total: int | None = None) -> None:
    """Print a table row (and its validation results) for each step verl's file logger appends,
    with the time left to step `total`."""
    pos, printed, seconds = 0, False, []
    while True:
        done = stop.is_set()
        if path.exists():
            with path.open() as f:
                f.seek(pos)
                for line in f:
                    if not line.endswith("\n"):
                        break
                    pos += len(line.encode())
                    rec = json.loads(line)
                    if not printed:
                        say(header())
                        printed = True
                    if isinstance(rec["data"].get("timing_s/step"), (int, float)):
                        seconds.append(float(rec["data"]["timing_s/step"]))
                    say(format_row(rec["step"], rec["data"], eta(rec["step"], total, seconds)))
                    for text in validation_lines(rec["data"]):
                        say(text)
        if done:
            return
        stop.wait(1.0)
