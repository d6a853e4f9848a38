"""A quiet console for `python -m recipes.train`: everything verl, Ray and vLLM print (the resolved
config, warnings, progress bars, worker logs) goes to the run's log file; the console gets only what
`say` writes (what is run, the step table, validation results, the `done:` line).

    with quiet(log_path) as say:
        say("step ...")            # to the terminal
        print("noise")             # to log_path, as does anything a subprocess or Ray writes

`-v` on the command line (recipes.verbose=true) leaves the console as it is. Before the run's folder
is known to be wanted (a config error), the output is held in memory and dropped unless asked for.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
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
