"""One training run's results across steps, in RESULTS_ROOT (eval.iterate's --out).

`step_rows` reads a row per RESULTS_ROOT/global_step_N whose summary.json is complete, in step
order; `best_steps` picks each average's best step (the earliest on a tie); `steps_table` is
steps.md's text; `write_run_outputs` rewrites steps.md, steps.json and accuracy_vs_step.png from
the steps evaluated with the given settings (saying which steps it leaves out).
`check_results_root` accepts a RESULTS_ROOT that is new, empty or this checkpoint root's (only
these files, global_step_N/ folders and a steps.json naming the same root); ResultsError otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

from eval.plot import AVERAGES, plot_steps, run_name
from eval.results import ResultsError, atomic_write_json, owned_only, pct, temporary_of
from eval.summary import summary_settings
from recipes.checkpoints import STEP_RE
from recipes.files import atomic_write_text

PLOT = "accuracy_vs_step.png"
RUN_FILES = ("steps.md", "steps.json", PLOT)  # RESULTS_ROOT's own files, beside global_step_N/


def step_rows(results_root: Path) -> list[dict]:
    """One row per evaluated step under RESULTS_ROOT (complete summaries only), by step."""
    rows = []
    for child in results_root.glob("global_step_*"):
        m = STEP_RE.match(child.name)
        path = child / "summary.json"
        if not m or not path.is_file():
            continue
        s = json.loads(path.read_text())
        if not s.get("complete"):
            continue
        series = {
            name: (100 * b["accuracy"]["mean"], 100 * b["accuracy"]["std"])
            for name, b in s["benchmarks"].items()
        }
        for label, key in zip(AVERAGES, ("per_benchmark_average", "per_question_average"), strict=True):
            series[label] = (100 * s[key]["accuracy"]["mean"], 100 * s[key]["accuracy"]["std"])
        rows.append({"step": int(m.group(1)), "model": s["model"], "series": series, "summary": s})
    return sorted(rows, key=lambda r: r["step"])


def best_steps(rows: list[dict]) -> dict[str, tuple[int, float]]:
    """Average name -> (step, mean %) of its highest mean; the earliest step wins a tie."""
    best = {}
    for label in AVERAGES:
        top = max(rows, key=lambda r: (r["series"][label][0], -r["step"]))
        best[label] = (top["step"], top["series"][label][0])
    return best


def steps_table(rows: list[dict], root: Path) -> str:
    settings = rows[-1]["summary"]["settings"]
    names = list(dict.fromkeys(n for r in rows for n in r["summary"]["benchmarks"]))
    kmax = max(settings["k"]) if settings["k"] else None
    label = f"avg@{settings['runs']}" if settings["decoding"] == "greedy" else f"mean@{settings['runs']}"
    head = ["step", *names, *AVERAGES]
    if kmax:
        head += [f"pass@{kmax} {a}" for a in AVERAGES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in rows:
        s = r["summary"]
        cells = [str(r["step"])]
        cells += [pct(s["benchmarks"][n]["accuracy"]["mean"]) if n in s["benchmarks"] else "-" for n in names]
        cells += [f"{r['series'][a][0]:.1f} ± {r['series'][a][1]:.1f}" for a in AVERAGES]
        if kmax:
            for key in ("per_benchmark_average", "per_question_average"):
                cells.append(pct(s[key]["pass_at_k"].get(str(kmax))))
        lines.append("| " + " | ".join(cells) + " |")
    best = best_steps(rows)
    protocol = f"protocol {settings['protocol']}, " if settings.get("protocol") else ""
    text = (
        f"{root}: {label} accuracy in % per step ({protocol}{settings['decoding']}, "
        f"template {settings['template']}, "
        f"max {settings['max_new_tokens']} new tokens, grading {settings['grading']}); averages: mean ± std "
        f"over the {settings['runs']} runs.\n\n" + "\n".join(lines) + "\n\n"
    )
    text += "\n".join(f"best step by {a}: {step} ({mean:.1f})" for a, (step, mean) in best.items()) + "\n"
    return text


def write_run_outputs(
    results_root: Path, checkpoint_root: Path, failed: dict[int, str], kwargs: dict
) -> str | None:
    """steps.md, steps.json and the plot from every step evaluated with these settings (`kwargs`
    of eval.run.evaluate; steps evaluated otherwise are left out, saying so); returns the table."""
    every = step_rows(results_root)
    rows = [r for r in every if r["summary"]["settings"] == summary_settings(r["model"], **kwargs)]
    if len(rows) < len(every):
        other = sorted(set(r["step"] for r in every) - set(r["step"] for r in rows))
        print(
            f"[iterate] steps {other} in {results_root} were evaluated with other settings: not in the table"
        )
    if not rows:
        return None
    table = steps_table(rows, checkpoint_root)
    atomic_write_text(results_root / "steps.md", table)
    best = best_steps(rows)
    atomic_write_json(
        results_root / "steps.json",
        {
            "checkpoint_root": str(checkpoint_root),
            "rows": [
                {
                    "step": r["step"],
                    "model": r["model"],
                    "accuracy": {k: {"mean": m, "std": s} for k, (m, s) in r["series"].items()},
                }
                for r in rows
            ],
            "best": {a: {"step": s, "mean": m} for a, (s, m) in best.items()},
            "incomplete_checkpoints": {str(k): v for k, v in failed.items()},
        },
    )
    plot_steps(rows, results_root / PLOT, title=f"{run_name(checkpoint_root)}: accuracy by training step")
    return table


def check_results_root(results_root: Path, root: Path) -> None:
    """RESULTS_ROOT is new, empty, or this run's (its files, global_step_N/ folders, and a steps.json
    of this checkpoint root); ResultsError in one sentence otherwise: its table would be replaced."""

    def ours(p: Path) -> bool:
        if STEP_RE.match(p.name):
            return p.is_dir()
        return (p.name in RUN_FILES and p.is_file()) or temporary_of(p, RUN_FILES)

    owned_only(results_root, ours, "--out", "eval.iterate")
    try:
        theirs = json.loads((results_root / "steps.json").read_text())["checkpoint_root"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if theirs != str(root):
        raise ResultsError(
            f"--out {results_root} holds the results of the checkpoints in {theirs}, not {root}: give another --out"
        )
