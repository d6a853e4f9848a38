"""Accuracy against training step: one panel per benchmark and one per average, in one PNG; one
run (eval.iterate writes it) or several overlaid (`python -m eval.plot RESULTS... --out PNG`).

Each point is a step's mean accuracy over its runs (greedy avg@R, or mean@n when sampling), with
an error bar of one standard deviation over those runs. Written atomically (temporary file, then
rename), marked as eval.plot's in its PNG text (`made_here`): the command replaces only such a
file, never one it did not write. matplotlib with the non-interactive Agg backend (no display
needed). matplotlib's font cache and config folder go to a temporary folder removed at exit
(unless MPLCONFIGDIR is set), not to ~/.cache/matplotlib and ~/.config/matplotlib.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from recipes.checkpoints import MAX_STEP
from recipes.files import atomic_write, matplotlib_dir, png_text

AVERAGES = ("per-benchmark average", "per-question average")
SOFTWARE = "eval.plot (verl_math_recipes)"  # the PNG's Software text: how `made_here` knows its own


def plot_steps(rows: list[dict], path: str | os.PathLike, title: str = "") -> Path:
    """One run: `rows`, one per step, {"step": N, "series": {name: (mean, std) or None}}, in %
    (from eval.iterate). Every series name gets a panel; missing points are left out."""
    return plot_runs({"": rows}, path, title)


def plot_runs(runs: dict[str, list[dict]], path: str | os.PathLike, title: str = "") -> Path:
    """Several runs overlaid (label -> rows as for plot_steps), one colour per run: a line through
    each step's mean, a band of one standard deviation over its repeats. Written atomically."""
    fig = figure(runs, title)  # first: it points matplotlib's cache away from ~/.cache
    import matplotlib.pyplot as plt

    try:
        atomic_write(
            path, lambda tmp: fig.savefig(tmp, dpi=120, metadata={"Software": SOFTWARE}), suffix=".png"
        )
    finally:
        plt.close(fig)
    return path


def figure(runs: dict[str, list[dict]], title: str = ""):
    """The matplotlib figure plot_runs saves."""
    matplotlib_dir()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    every = [r for rows in runs.values() for r in rows]
    names = [n for n in dict.fromkeys(n for r in every for n in r["series"]) if n not in AVERAGES]
    names += [n for n in AVERAGES if any(n in r["series"] for r in every)]
    steps = sorted({r["step"] for r in every})
    cols = min(4, max(1, len(names)))
    nrows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(4 * cols, 3 * nrows + (0.4 if len(runs) > 1 else 0)), squeeze=False
    )
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, name in zip(axes.flat, names, strict=False):
        top = 0.0
        for k, (label, rows) in enumerate(runs.items()):
            pts = sorted((r["step"], *r["series"][name]) for r in rows if r["series"].get(name) is not None)
            if not pts:
                continue
            x, mean, std = zip(*pts, strict=True)
            colour = colours[k % len(colours)]
            ax.plot(x, mean, marker="o", markersize=3, linewidth=1.2, color=colour, label=label or None)
            low = [m - s for m, s in zip(mean, std, strict=True)]
            high = [m + s for m, s in zip(mean, std, strict=True)]
            ax.fill_between(x, low, high, color=colour, alpha=0.2, linewidth=0)
            top = max(top, *high)
        ax.set_title(name, fontsize=10, fontweight="bold" if name in AVERAGES else "normal")
        ax.set_xlabel("training step")
        ax.set_ylabel("accuracy (%)")
        if len(steps) <= 12:  # every evaluated step, as a whole number
            ax.set_xticks(steps)
        else:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, min(100.0, max(10.0, 1.15 * top)))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    if len(runs) > 1:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(len(runs), 5), fontsize=9, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 if len(runs) > 1 else 0, 1, 1))
    return fig


def made_here(path: str | os.PathLike) -> bool:
    """Whether `path` is a PNG this module wrote (its tEXt chunk `Software` is SOFTWARE)."""
    return png_text(path).get("Software") == SOFTWARE


def load_rows(results: str | os.PathLike) -> list[dict]:
    """The rows of an eval.iterate results folder (or its steps.json) in plot_runs's form; a
    ValueError in one sentence when it is not that (no rows, a field of the wrong type, a number
    that is not finite)."""
    path = Path(results)
    path = path / "steps.json" if path.is_dir() else path
    try:
        data = json.loads(path.read_text())
        rows = [
            {
                "step": int(r["step"]),
                "series": {str(k): (float(v["mean"]), float(v["std"])) for k, v in r["accuracy"].items()},
            }
            for r in data["rows"]
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not eval.iterate's steps.json ({type(e).__name__}: {e})") from None
    if not rows:
        raise ValueError(f"{path}: no evaluated step to plot")
    for r in rows:
        if not 0 <= r["step"] <= MAX_STEP or not all(
            map(math.isfinite, (x for v in r["series"].values() for x in v))
        ):
            raise ValueError(f"{path}: step {r['step']} has a step number or an accuracy out of range")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eval.plot",
        description="Overlay the accuracy-vs-step curves of several evaluated runs (eval.iterate results "
        "folders, or their steps.json): one panel per benchmark and per average, one colour per run, "
        "a band of one standard deviation over the repeats. Re-plots from the results files; "
        "evaluates nothing.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python -m eval.plot runs/grpo/eval runs/ta_grpo/eval --labels GRPO,TA-GRPO --out compare.png",
    )
    p.add_argument(
        "results", nargs="+", help="eval.iterate results folders (holding steps.json), or steps.json files"
    )
    p.add_argument("--labels", help="comma-separated run names (default: each run's folder name)")
    p.add_argument(
        "--out", required=True, help="the PNG to write (new, or one eval.plot wrote: it is replaced)"
    )
    p.add_argument("--title", default="", help="figure title")
    args = p.parse_args(argv)
    labels = args.labels.split(",") if args.labels else [run_name(r) for r in args.results]
    if len(labels) != len(args.results) or len(set(labels)) != len(labels):
        p.error(f"--labels: need {len(args.results)} distinct names, got {labels}")
    try:
        runs = {label: load_rows(r) for label, r in zip(labels, args.results, strict=True)}
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.is_dir() or (out.exists() and not made_here(out)):
        what = "a folder" if out.is_dir() else "a file eval.plot did not write"
        print(f"error: --out {out} is {what}: give a new file name", file=sys.stderr)
        return 2
    try:
        print(f"wrote {plot_runs(runs, args.out, args.title)}")
    except OSError as e:
        print(f"error: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


def run_name(path: str | os.PathLike) -> str:
    """A run's name from one of its folders: `outputs/<project>/<run>/checkpoints`, `.../eval` or
    `.../eval/steps.json` -> `<run>`; any other folder: its own name."""
    path = Path(path).resolve()
    path = path.parent if path.name == "steps.json" else path
    return path.parent.name if path.name in ("eval", "checkpoints") else path.name


if __name__ == "__main__":
    sys.exit(main())
