"""The results half of scripts/gpu_smoke.py: one preset's run judged from its files (a Result),
its result line and the summary table. Standard library only at import; run as part of
gpu_smoke.py (imported from the script's own folder), not on its own.

A preset passes when training exited 0, logged all STEPS steps, and the conversion and the
evaluation exited 0. Its figures (s/step, peak, plan, actor GiB, tokens/s, eval) come from the
run's files; a missing one is None, shown as `-`, and does not fail the preset.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

STEPS = 2  # training steps of each smoke run: the plan's total_training_steps, all logged to pass


@dataclass
class Result:
    preset: str
    status: str  # pass | fail | skip
    reason: str = ""
    steps: int = 0
    step_s: float | None = None
    tokens_per_s: float | None = None
    actor_gib: float | None = None
    peak_gib: float | None = None
    plan_gib: float | None = None
    eval_acc: float | None = None


def read_metrics(run_dir: Path) -> list[dict]:
    """The step records ({"step": N, "data": {...}}) of the newest metrics/*.jsonl of a run
    (file names are launch times, so the newest sorts last); [] when there is none. A line cut
    off by a crash is ignored."""
    files = sorted((run_dir / "metrics").glob("*.jsonl"))
    if not files:
        return []
    records = []
    for line in files[-1].read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("data"), dict) and "step" in rec:
            records.append(rec)
    return records


def _number(data: dict, key: str) -> float | None:
    value = data.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def gpu_peak_gib(log: Path) -> float | None:
    """The largest memory.used (MiB) in nvidia-smi's `index, memory.used` CSV samples, in GiB."""
    if not log.is_file():
        return None
    peak = None
    for line in log.read_text(errors="replace").splitlines():
        cells = [c.strip() for c in line.split(",")]
        try:
            mib = float(cells[-1])
        except (ValueError, IndexError):
            continue
        peak = mib if peak is None else max(peak, mib)
    return None if peak is None else peak / 1024


def eval_accuracy(eval_dir: Path | None) -> float | None:
    try:
        summary = json.loads((eval_dir / "summary.json").read_text())
        return float(summary["per_question_average"]["accuracy"]["mean"])
    except (TypeError, OSError, ValueError, KeyError):
        return None


def judge(
    preset: str,
    run_dir: Path,
    train_rc: int | None,
    convert_rc: int | None = None,
    eval_rc: int | None = None,
    eval_dir: Path | None = None,
    gpu_log: Path | None = None,
    skip: str = "",
    steps: int = STEPS,
    gpu_gib: float | None = None,
) -> Result:
    if skip:
        return Result(preset, "skip", skip)
    records = read_metrics(run_dir)
    r = Result(preset, "pass", steps=len({rec["step"] for rec in records}))
    if records:
        last = max(records, key=lambda rec: rec["step"])["data"]
        step = _number(last, "timing_s/step")
        if step is not None:
            r.step_s = step - (_number(last, "timing_s/save_checkpoint") or 0.0)
        tokens = _number(last, "perf/total_num_tokens")
        if tokens is not None and r.step_s:
            r.tokens_per_s = tokens / r.step_s
        mems = [
            m
            for rec in records
            if (m := _number(rec["data"], "actor/perf/max_memory_allocated_gb")) is not None
        ]
        r.actor_gib = max(mems) if mems else None
    r.peak_gib = gpu_peak_gib(gpu_log) if gpu_log else None
    r.plan_gib = planned_gib(run_dir, gpu_gib)
    r.eval_acc = eval_accuracy(eval_dir)
    if train_rc != 0:
        r.status, r.reason = (
            "fail",
            f"training exited {train_rc}" if train_rc is not None else "training not run",
        )
    elif not records:
        r.status, r.reason = "fail", f"no metrics in {run_dir / 'metrics'}"
    elif r.steps < steps:
        r.status, r.reason = "fail", f"training logged {r.steps} of {steps} steps"
    elif convert_rc != 0:
        r.status, r.reason = "fail", f"conversion exited {convert_rc}"
    elif eval_rc != 0:
        r.status, r.reason = "fail", f"evaluation exited {eval_rc}"
    return r


def planned_gib(run_dir: Path, gpu_gib: float | None) -> float | None:
    """recipes.plan's peak per GPU for the run's resolved config, or None without one."""
    resolved = run_dir / "config.yaml"
    if not resolved.is_file():
        return None
    from omegaconf import OmegaConf

    from recipes.plan import H100_GIB, estimate

    try:
        return estimate(OmegaConf.load(resolved), gpu_gib or H100_GIB).peak_gib
    except Exception as exc:  # noqa: BLE001 - the smoke run's verdict must not depend on the plan
        print(f"[gpu_smoke] no plan for {resolved}: {exc}", file=sys.stderr)
        return None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def line(r: Result) -> str:
    """One preset's result, one line."""
    head = f"{r.preset}: {r.status.upper()}"
    if r.status == "skip":
        return f"{head} ({r.reason})"
    text = (
        f"{head}  {_fmt(r.step_s, '.1f')} s/step  peak {_fmt(r.peak_gib, '.1f')} GiB  "
        f"plan {_fmt(r.plan_gib, '.1f')} GiB  "
        f"actor {_fmt(r.actor_gib, '.1f')} GiB  {_fmt(r.tokens_per_s, '.0f')} tokens/s  "
        f"eval {_fmt(None if r.eval_acc is None else 100 * r.eval_acc, '.1f')}%"
    )
    return f"{text}  ({r.reason})" if r.reason else text


COLUMNS = ("preset", "result", "s/step", "peak GiB", "plan GiB", "actor GiB", "tokens/s", "eval acc", "note")


def table(results: list[Result]) -> str:
    """The summary: a Markdown table, one row per preset, and a count line."""
    rows = [
        (
            r.preset,
            r.status,
            _fmt(r.step_s, ".1f"),
            _fmt(r.peak_gib, ".1f"),
            _fmt(r.plan_gib, ".1f"),
            _fmt(r.actor_gib, ".1f"),
            _fmt(r.tokens_per_s, ".0f"),
            "-" if r.eval_acc is None else f"{100 * r.eval_acc:.1f}%",
            r.reason,
        )
        for r in results
    ]
    out = [f"| {' | '.join(COLUMNS)} |", "|---|---|" + "---:|" * 6 + "---|"]
    out += [f"| {' | '.join(row)} |" for row in rows]
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "skip")}
    out.append(
        f"\n{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped of {len(results)} presets"
    )
    return "\n".join(out)
