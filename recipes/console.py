"""A quiet console for `python -m recipes.train`: everything verl, Ray and vLLM print (the resolved
config, warnings, progress bars, worker logs) goes to the run's log file; the console gets only what
`say` writes (what is run, the step table, validation results, the `done:` line).

    with quiet(log_path) as say:
        say("step ...")            # to the terminal
        print("noise")             # to log_path, as does anything a subprocess or Ray writes

`-v` on the command line (recipes.verbose=true) leaves the console as it is. Before the run's folder
is known to be wanted (a config error), the output is held in memory and dropped unless asked for.

The step table: `follow` prints a row (`format_row`, under `header`) for each step verl's file
logger appends, with its validation results and the time left.
"""

from __future__ import annotations

import contextlib
import json
import os
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
    that prints to the terminal. On an exception other than `expected` ones (which explain
    themselves) the log's last lines are shown."""
    if not enabled:
        yield lambda text: print(text, flush=True)
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_out), "w", buffering=1)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)

    def say(text: str) -> None:
        terminal.write(text + "\n")
        terminal.flush()

    failed = False
    try:
        yield say
    except expected:
        raise
    except BaseException:
        failed = True
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
    the text once the block ends (normally or not), and the file is removed."""
    fd, name = tempfile.mkstemp(prefix="recipes-", suffix=".log")
    os.close(fd)
    scratch, text = Path(name), []
    try:
        with quiet(scratch, enabled, expected):
            yield text
    finally:
        text.append(scratch.read_text(errors="replace"))
        scratch.unlink(missing_ok=True)


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
