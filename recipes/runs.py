"""Follow and compare training runs, from what their folders record.

    python -m recipes.runs                    # every run under outputs/: status, step, reward, ETA
    python -m recipes.runs /scratch/runs      # ... under another folder
    python -m recipes.runs compare outputs/verl_math_recipes/demo_cpu \\
        outputs/verl_math_recipes/demo_cpu_cw_grpo --out compare.png

A run is a folder `python -m recipes.train` wrote: `config.yaml` and `logs/` or `metrics/`
(docs/running.md#outputs). Its status:

  running   a launch holds the lock on its newest log (recipes/console.py: `hold`; the kernel drops
            it when the launch ends, however it ends). Where the file system has no locks, or the
            launch ran on another machine (whose locks a shared file system may not show here), a
            log without its last word that was written to in the last STALE_S seconds.
  finished  the newest log ends its launch with recipes.train's `done:` line (a run logged before
            the log had one: the metrics reached trainer.total_training_steps).
  failed    neither: the launch crashed (the log's `failed:` line says how) or was stopped without
            a word (killed, out of memory, out of time); a relaunch with the same command resumes.

The step is the newest launch's last step (before its first, the checkpoint it said it resumes
from), out of the run's step count (config.yaml), with that step's reward (`critic/score/mean`) and
accuracy (`grader/acc`); a running run's ETA is the step table's (recipes/console.py: the median step of its launch times the steps left), less the
time since its last step.

`compare` overlays the runs' training curves, one panel per metric (reward, accuracy, entropy,
response length, and each validation score `val-core/*`), one colour per run. A run's metrics are
`metrics/<launch time>.jsonl`, one file per launch: they are joined by step, a later launch's
value winning (a resumed run repeats the steps after its checkpoint). The PNG is written
atomically and marked as this tool's; an existing file without the mark is not replaced unless
--force.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from recipes import console, files

STALE_S = 600  # a log untouched this long is no live launch's (where its lock cannot be seen)
TAIL_BYTES = 1 << 18  # the end of a log read for its last word (what Ray prints at exit follows it)
TRAINING = (
    ("reward", "critic/score/mean"),
    ("accuracy", "grader/acc"),
    ("entropy", "actor/entropy"),
    ("response length (tokens)", "response_length/mean"),
)
# a line style and marker per run besides its colour: runs that agree on a step stay visible
STYLES = [
    {"linestyle": "-", "marker": "o", "markersize": 4},
    {"linestyle": "--", "marker": "x", "markersize": 6},
    {"linestyle": ":", "marker": "s", "markersize": 4, "fillstyle": "none"},
    {"linestyle": "-.", "marker": "^", "markersize": 4, "fillstyle": "none"},
]
MARK = ("Software", "python -m recipes.runs compare")  # the PNG text chunk that makes a file ours


class RunError(ValueError):
    """A run folder that cannot be read; the message is one sentence naming the file."""


# ------------------------------------------------------------------------------- one run
def is_run(folder: Path) -> bool:
    return (folder / "config.yaml").is_file() and (
        (folder / "logs").is_dir() or (folder / "metrics").is_dir()
    )


def launch_records(path: Path) -> list[tuple[int, dict]]:
    """(step, metrics) of one launch's metrics file, in order. A last line without its newline is
    being written: left out. RunError for a line that is not verl's file logger's."""
    try:
        lines = path.read_text(errors="replace").split("\n")
    except OSError as e:
        raise RunError(f"{path} cannot be read ({e.strerror or e})") from None
    out = []
    for number, line in enumerate(lines[:-1], 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            step, data = rec["step"], rec["data"]
            if isinstance(step, bool) or not isinstance(step, int) or not isinstance(data, dict):
                raise TypeError("step is not a whole number or data not a mapping")
        except (ValueError, KeyError, TypeError) as e:
            raise RunError(f"{path} line {number} is not a step record of verl's file logger ({e})") from None
        out.append((step, data))
    return out


def records(run: Path) -> dict[int, dict]:
    """step -> metrics of every launch of `run`, joined by step in launch order (a later value of a
    key wins: a resumed launch repeats the steps after its checkpoint)."""
    steps: dict[int, dict] = {}
    for path in sorted((run / "metrics").glob("*.jsonl")):
        for step, data in launch_records(path):
            steps.setdefault(step, {}).update(data)
    return dict(sorted(steps.items()))


def total_steps(run: Path) -> int | None:
    """The run's step count from its config.yaml (recipes.compose.planned_steps), None if unknown."""
    from omegaconf import OmegaConf

    from recipes.compose import planned_steps

    try:
        return planned_steps(OmegaConf.load(run / "config.yaml"))
    except Exception:  # noqa: BLE001 - a config this tool cannot read: no step count, still a listing
        return None


def _text(log: Path, end: bool) -> str:
    """The first or last TAIL_BYTES of a log."""
    try:
        with log.open("rb") as f:
            if end:
                f.seek(max(0, log.stat().st_size - TAIL_BYTES))
            return f.read(TAIL_BYTES).decode(errors="replace")
    except OSError:
        return ""


def last_word(log: Path) -> str | None:
    """The newest `done:` or `failed:` line recipes.train wrote at the end of a launch's log."""
    words = [ln for ln in _text(log, end=True).splitlines() if ln.startswith(("done: ", "failed: "))]
    return words[-1] if words else None


def launch_host(log: Path) -> str | None:
    """The machine the launch ran on, as its log says (`launch: pid N on HOST`, console.hold)."""
    found = re.search(r"^launch: pid [0-9]+ on (\S+)$", _text(log, end=False), re.M)
    return found[1] if found else None


def resumed_step(log: Path) -> int | None:
    """The checkpoint step a launch said it resumes from (`resume: from global_step_N`)."""
    found = re.search(r"^resume: from global_step_([0-9]+) ", _text(log, end=False), re.M)
    return int(found[1]) if found else None


def newest_launch(run: Path) -> tuple[Path | None, Path | None]:
    """The newest launch's log and metrics file (recipes.train names both by its launch time);
    None for what it does not have (yet)."""
    logs = sorted((run / "logs").glob("*.log"))
    if not logs:
        return None, None
    metrics = run / "metrics" / f"{logs[-1].stem}.jsonl"
    return logs[-1], metrics if metrics.is_file() else None


@dataclass
class Run:
    path: Path
    status: str = "failed"
    step: int | None = None
    total: int | None = None
    last: dict = field(default_factory=dict)
    eta_s: float | None = None
    note: str = ""


def inspect(path: Path, now: float | None = None) -> Run:
    """A run's status, step, last reward and accuracy, and ETA (module docstring)."""
    now = time.time() if now is None else now
    run = Run(path, total=total_steps(path))
    newest, metrics = newest_launch(path)
    try:
        steps = records(path)
        # where the newest launch is: its last step, else the checkpoint it resumed from (an
        # earlier launch may have logged steps past it, which this one repeats)
        mine = [s for s, _ in launch_records(metrics)] if metrics else []
    except RunError as e:
        steps, mine, run.note = {}, [], str(e)
    if mine:
        run.step = mine[-1]
    elif newest and resumed_step(newest) is not None:
        run.step = resumed_step(newest)
    elif steps:
        run.step = max(steps)
    trained = [s for s, d in steps.items() if TRAINING[0][1] in d and s <= (run.step or 0)]
    run.last = steps[trained[-1]] if trained else {}
    live = console.live(newest) if newest else False
    word = last_word(newest) if newest else None
    host = launch_host(newest) if newest else None
    if not live and word is None and (live is None or (host and host != socket.gethostname())):
        # no locks here, or the launch ran on another machine (a Slurm node), whose locks a
        # shared file system may not show here: a log written to lately is a live launch's
        live = now - newest.stat().st_mtime < STALE_S
    if live:
        run.status = "running"
        run.eta_s = _eta(path, run, now)
    elif (word or "").startswith("done: ") or (
        word is None and run.total and run.step is not None and run.step >= run.total
    ):
        run.status = "finished"
    else:
        run.status = "failed"
        run.note = run.note or (word[len("failed: ") :] if word else "stopped without a word (killed?)")
    return run


def _eta(path: Path, run: Run, now: float) -> float | None:
    """The step table's time left at the last step, less the time since it was logged."""
    _, metrics = newest_launch(path)
    if metrics is None or run.step is None:
        return None  # no step of this launch yet: no time per step
    try:
        done = launch_records(metrics)
    except RunError:
        return None
    seconds = [float(d["timing_s/step"]) for _, d in done if isinstance(d.get("timing_s/step"), (int, float))]
    left = console.eta(run.step, run.total, seconds)
    return None if left is None else max(0.0, left - (now - metrics.stat().st_mtime))


# ------------------------------------------------------------------------------- the listing
def find_runs(root: Path) -> list[Path]:
    """Run folders at or under `root`, sorted; nothing below a run folder is searched."""
    found = []
    for here, dirs, _ in os.walk(root):
        if is_run(Path(here)):
            found.append(Path(here))
            dirs[:] = []
        else:
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return sorted(found)


def _number(value, fmt: str) -> str:
    return fmt.format(value) if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def table(runs: list[Run], root: Path) -> str:
    rows = [("run", "status", "step", "reward", "acc", "eta", "note")]
    for r in runs:
        name = str(root if r.path == root else root / r.path.relative_to(root))
        step = "-" if r.step is None else f"{r.step}/{r.total if r.total else '?'}"
        rows.append(
            (
                name,
                r.status,
                step,
                _number(r.last.get("critic/score/mean"), "{:.3f}"),
                _number(r.last.get("grader/acc"), "{:.3f}"),
                console.format_duration(r.eta_s) if r.status == "running" else "-",
                r.note,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    right = (False, False, True, True, True, True)
    return "\n".join(
        "  ".join(
            [
                *(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row[:6], widths, right, strict=True)),
                row[6],
            ]
        ).rstrip()
        for row in rows
    )


# ------------------------------------------------------------------------------- the comparison
def curves(runs: dict[str, dict[int, dict]]) -> list[tuple[str, str]]:
    """(panel title, metric) for each panel: the training metrics, then each validation score."""
    val = sorted(
        {k for steps in runs.values() for d in steps.values() for k in d if k.startswith("val-core/")}
    )
    return [*TRAINING, *((f"validation: {k[len('val-core/') :]}", k) for k in val)]


def figure(runs: dict[str, dict[int, dict]], title: str = ""):
    """One panel per metric of `curves`, one colour per run (label -> step -> metrics)."""
    from recipes.files import matplotlib_dir

    matplotlib_dir()  # before matplotlib is imported
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = curves(runs)
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3 * nrows + 0.4), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (name, key) in zip(axes.flat, panels, strict=False):
        for k, (label, steps) in enumerate(runs.items()):
            pts = [(s, d[key]) for s, d in steps.items() if isinstance(d.get(key), (int, float))]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.plot(
                    x,
                    y,
                    label=label,
                    color=colours[k % len(colours)],
                    linewidth=1.2,
                    **STYLES[k % len(STYLES)],
                )
        if not ax.lines:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles, labels = {}, []
    for ax in axes.flat:  # every run that has a curve somewhere, once
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in handles:
                handles[label] = h
                labels.append(label)
    fig.legend(
        [handles[x] for x in labels], labels, loc="lower center", ncol=min(len(labels), 4), frameon=False
    )
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def ours(path: Path) -> str | None:
    """None when `path` is a comparison this tool wrote (its mark), else what it is instead."""
    return (
        None
        if files.png_text(path).get(MARK[0]) == MARK[1]
        else "was not written by python -m recipes.runs compare"
    )


def compare(paths: list[Path], out: Path, labels: list[str] | None = None, title: str = "") -> Path:
    """Read every run, then write the comparison to `out` (atomically). RunError for a run that
    is not one or has no step logged."""
    from recipes.files import atomic_write

    runs = {}
    labels = labels or _labels(paths)
    for label, path in zip(labels, paths, strict=True):
        if not path.is_dir() or not (path / "metrics").is_dir():
            raise RunError(f"{path} is not a run folder of recipes.train (no metrics/ folder in it)")
        steps = records(path)
        if not steps:
            raise RunError(f"{path}/metrics holds no step yet: nothing to compare")
        runs[label] = steps
    fig = figure(runs, title)
    import matplotlib.pyplot as plt

    try:
        atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=110, metadata=dict([MARK])), suffix=".png")
    finally:
        plt.close(fig)
    return out


def _labels(paths: list[Path]) -> list[str]:
    """Each run's folder name; the paths as given where two names are the same."""
    names = [p.resolve().name for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


# ------------------------------------------------------------------------------- command line
DEFAULT_DIR = "outputs"  # where runs go by default (outputs/<project>/<experiment>), from where they start


def _fail(message: str) -> int:
    print(f"recipes.runs: {message}", file=sys.stderr)
    return 2


def list_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m recipes.runs",
        description="List the training runs under DIR: status (running, finished, failed), step k/K, the last "
        "step's reward and accuracy, and the time left of a running one.",
        epilog="overlay runs' training curves in one PNG (python -m recipes.runs compare --help):\n"
        "  python -m recipes.runs compare RUN [RUN ...] --out PNG [--labels A,B] [--title T] [--force]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dir", nargs="?", default=DEFAULT_DIR, metavar="DIR", help="folder holding runs (default: outputs)"
    )
    args = p.parse_args(argv)
    root = Path(args.dir)
    if not root.exists() and args.dir == DEFAULT_DIR:  # nothing trained from this folder yet
        print(f"no runs under {root} (a run writes there: python -m recipes.train experiment=demo_cpu)")
        return 0
    if not root.exists():
        return _fail(f"{root}: no such folder")
    if not root.is_dir():
        return _fail(f"{root} is a file, not a folder of runs")
    if not os.access(root, os.R_OK | os.X_OK):
        return _fail(f"{root} cannot be read")
    found = find_runs(root)
    if not found:
        print(f"no runs under {root} (a run folder holds config.yaml and logs/ or metrics/)")
        return 0
    print(table([inspect(r) for r in found], root))
    return 0


def compare_main(argv: Sequence[str]) -> int:
    from recipes.files import Refused, check_target

    p = argparse.ArgumentParser(
        prog="python -m recipes.runs compare",
        description="Overlay the training curves of runs (reward, accuracy, entropy, response length, "
        "validation scores) from their metrics files, one colour per run, in one PNG.",
        epilog="example:\n  python -m recipes.runs compare outputs/verl_math_recipes/demo_cpu "
        "outputs/verl_math_recipes/demo_cpu_cw_grpo --out compare.png",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", help="run folders (each holding metrics/)")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--labels", help="comma-separated names, one per run (default: each run's folder name)")
    p.add_argument("--title", default="", help="figure title")
    p.add_argument("--force", action="store_true", help="replace --out even if this tool did not write it")
    args = p.parse_args(argv)
    paths = [Path(r) for r in args.runs]
    labels = args.labels.split(",") if args.labels else None
    if labels is not None and (len(labels) != len(paths) or len(set(labels)) != len(labels) or "" in labels):
        return _fail(f"--labels: {len(paths)} distinct names needed, one per run; got {args.labels!r}")
    out = Path(args.out)
    if out.suffix.lower() != ".png":
        return _fail(f"--out {out}: the comparison is a PNG; name a file ending in .png")
    try:
        check_target(out, folder=False, foreign=ours, force=args.force, replaces="that file", option="--out")
        print(f"wrote {compare(paths, out, labels, args.title)}")
    except (RunError, Refused) as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"cannot write --out {out}: {e.strerror or e}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["compare"]:  # a folder named compare: ./compare
        return compare_main(argv[1:])
    return list_main(argv)


if __name__ == "__main__":
    sys.exit(main())
