"""Accuracy against training step: one panel per benchmark and one per average, in one PNG.

Each point is a step's mean accuracy over its runs (greedy avg@R, or mean@n when sampling), with
an error bar of one standard deviation over those runs. Written atomically (temporary file, then
rename). matplotlib with the non-interactive Agg backend (no display needed). matplotlib's font
cache and config folder go to a temporary folder removed at exit (unless MPLCONFIGDIR is set), not
to ~/.cache/matplotlib and ~/.config/matplotlib.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

AVERAGES = ("per-benchmark average", "per-question average")


def _matplotlib_dir() -> None:
    """Point MPLCONFIGDIR at a temporary folder removed at exit, unless it is set or matplotlib was
    imported already (it reads the variable on import)."""
    import sys

    if "MPLCONFIGDIR" in os.environ or "matplotlib" in sys.modules:
        return
    import atexit
    import shutil

    root = tempfile.mkdtemp(prefix="eval-matplotlib-")
    os.environ["MPLCONFIGDIR"] = root
    atexit.register(shutil.rmtree, root, ignore_errors=True)


def plot_steps(rows: list[dict], path: str | os.PathLike, title: str = "") -> Path:
    """`rows`: one per step, {"step": N, "series": {name: (mean, std) or None}}, in % (from
    eval.iterate). Every series name gets a panel; missing points are left out."""
    _matplotlib_dir()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    names = [n for n in dict.fromkeys(n for r in rows for n in r["series"]) if n not in AVERAGES]
    names += [n for n in AVERAGES if any(n in r["series"] for r in rows)]
    cols = min(4, max(1, len(names)))
    nrows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        pts = [(r["step"], *r["series"][name]) for r in rows if r["series"].get(name) is not None]
        if pts:
            steps, means, stds = zip(*pts, strict=True)
            ax.errorbar(steps, means, yerr=stds, marker="o", markersize=3, capsize=2, linewidth=1)
        ax.set_title(name, fontsize=10, fontweight="bold" if name in AVERAGES else "normal")
        ax.set_xlabel("step")
        ax.set_ylabel("accuracy (%)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        top = max((m + sd for _, m, sd in pts), default=0.0)
        ax.set_ylim(0, max(1.0, 1.1 * top))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)
    return path
