"""Does it learn? Train each method on the same task for the same steps through verl's real trainer
on the CPU, and measure held-out greedy accuracy before training and at every checkpoint.

    .venv/bin/python scripts/bench/learning.py --methods grpo --out results/learning
    .venv/bin/python scripts/bench/learning.py --methods grpo,prompt_aug,ta_grpo,cw_grpo,prorl --out DIR
    .venv/bin/python scripts/bench/learning.py --methods grpo --steps 2 --eval-every 1 --model tiny --out DIR

The task: the toy arithmetic questions (`python -m recipes.tools.data toy_arithmetic`: 2,000 train and
200 held-out test questions, seed 0; no question is in both). The preset is
configs/experiment/learning_cpu.yaml (SmolLM2-135M-Instruct); each method is added to GRPO as in
`method=[grpo,<method>]`, with the settings of METHOD_OVERRIDES below.

For each method:
  1. `python -m recipes.train experiment=learning_cpu method=[...]`, a checkpoint every
     --eval-every steps, into OUT/runs/<method>/ (verl's console and log lines in train.log);
  2. `python -m eval.iterate` over those checkpoints: greedy decoding (one run: greedy repeats
     agree), the held-out questions under the training prompt (the question plus the
     step-by-step instruction as the user turn), the project's grader with the training
     reward's rule (`--grading lenient`), vLLM (--eval-backend hf: transformers);
The model before training is evaluated once, with `python -m eval.run`, and is step 0 of every
curve. Then OUT/summary.json ({"<method>": {"initial_acc", "final_acc", "best_acc", "steps",
"wall_s", "heldout_n"}}), OUT/summary.md (the table) and OUT/learning.png (held-out accuracy and
train reward against the step, one curve per method) are written.

wall_s is the method's training launch (start-up included) plus its checkpoint evaluations.
A rerun with the same OUT skips what is finished: a trained method (its train.done file), an
evaluated checkpoint (eval.iterate's own resume). Needs no GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
METHODS = ("grpo", "prompt_aug", "ta_grpo", "cw_grpo", "prorl")
# What each method changes for this benchmark, beyond its own configs/method/<name>.yaml.
METHOD_OVERRIDES = {
    "grpo": [],
    # a template per rollout (the paper's per-prompt draw gives whole groups one template); the
    # longest template takes ~300 of SmolLM2's tokens
    "prompt_aug": ["recipes.prompt_aug.sampling=per_rollout", "data.max_prompt_length=384"],
    # the toy set's three fixed rephrasings (recipes.tools.data.TOY_REPHRASINGS) per question
    "ta_grpo": [],
    "cw_grpo": [],
    # the report resets every few hundred steps of thousands; scaled to this run's length
    "prorl": ["recipes.prorl.reset_every=10"],
}
BENCH = "toy_heldout"


def method_list(method: str) -> str:
    return "[grpo]" if method == "grpo" else f"[grpo,{method}]"


def train_overrides(base: list[str], method: str, steps: int, eval_every: int, run: Path) -> list[str]:
    """The `recipes.train` overrides of one method's training launch."""
    return [
        *base,
        f"method={method_list(method)}",
        f"trainer.total_training_steps={steps}",
        f"trainer.save_freq={eval_every}",
        f"recipes.output_dir={run}",
        *METHOD_OVERRIDES[method],
    ]


def run_logged(cmd: list[str], log: Path, env: dict | None = None) -> float:
    """Run `cmd` with its output in `log`; seconds it took. Exits with the log's tail on failure."""
    start = time.time()
    with log.open("a") as f:
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{log.read_text()[-3000:]}")
    return time.time() - start


def write_heldout(cache_overrides: list[str], out: Path, limit: int | None = None) -> int:
    """The test split (its first `limit` rows) as eval.run's local benchmark file: the user turn
    the trainer shows."""
    import pyarrow.parquet as pq

    captured = io.StringIO()  # verl's import-time warnings (engines it cannot load on a CPU)
    try:
        with contextlib.redirect_stderr(captured):
            from recipes.train import compose, prepare

            cfg = compose(cache_overrides)
            prepare(cfg)  # the model and the data, built once here (not inside a timed launch)
    except BaseException:
        sys.stderr.write(captured.getvalue())
        raise
    rows = pq.read_table(cfg.data.val_files).to_pylist()[:limit]
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"problem": r["prompt"][-1]["content"], "answer": r["reward_model"]["ground_truth"]})
        for r in rows
    ]
    (out / f"{BENCH}.jsonl").write_text("\n".join(lines) + "\n")
    return len(rows)


def eval_args(heldout_dir: Path, max_new_tokens: int, backend: str) -> list[str]:
    return [
        "--backend",
        backend,
        "--data-dir",
        str(heldout_dir),
        "--benchmarks",
        BENCH,
        "--template",
        "none",
        "--grading",
        "lenient",
        "--repeats",
        "1",
        "--max-new-tokens",
        str(max_new_tokens),
        "--max-model-len",
        "1024",
        "--dtype",
        "float32",
        "--no-progress",
    ]


def accuracy(summary_file: Path) -> float:
    return json.loads(summary_file.read_text())["per_question_average"]["accuracy"]["mean"]


def train_metrics(run: Path) -> list[dict]:
    records = {}
    for f in sorted((run / "metrics").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            records[r["step"]] = r["data"]  # a resumed launch repeats no step; the last wins
    return [{"step": s, **records[s]} for s in sorted(records)]


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The command line, checked; and the methods it names, in order."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", default="grpo", help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--out", type=Path, required=True, help="results folder (reused: finished work is kept)")
    p.add_argument("--steps", type=int, default=30, help="training steps per method (default 30)")
    p.add_argument("--eval-every", type=int, default=10, help="checkpoint and evaluate every N steps")
    p.add_argument("--model", default="smollm2_135m", help="configs/model/ name (default smollm2_135m)")
    p.add_argument("--limit", type=int, help="only the first N held-out questions (quick checks)")
    p.add_argument("--eval-backend", default="vllm", choices=("vllm", "hf"), help="eval backend (vllm)")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="train and evaluate nothing: the table and plot of the methods already finished in OUT",
    )
    p.add_argument("overrides", nargs="*", help="more recipes.train overrides for every method")
    args = p.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or not methods:
        p.error(f"--methods: unknown {unknown}; choose from {','.join(METHODS)}")
    if args.steps < 1 or args.eval_every < 1 or (args.limit is not None and args.limit < 1):
        p.error("--steps, --eval-every and --limit must be >= 1")
    return args, methods


class Task(NamedTuple):
    """What every method shares: the launch overrides, the held-out questions, the eval settings."""

    out: Path
    base: list[str]  # recipes.train overrides of every launch
    heldout_n: int
    eval_args: list[str]  # eval.run's and eval.iterate's
    report_only: bool


def initial_accuracy(task: Task, model_path: str) -> float:
    """The model before training, evaluated once (step 0 of every curve)."""
    initial_dir = task.out / "eval_step0"
    if not (initial_dir / "summary.json").exists() and not task.report_only:
        cmd = [sys.executable, "-m", "eval.run", "--model", model_path, "--out", str(initial_dir)]
        run_logged([*cmd, *task.eval_args], task.out / "eval_step0.log")
    initial = accuracy(initial_dir / "summary.json")
    print(f"step 0 (before training): held-out accuracy {initial:.3f}", flush=True)
    return initial


def train_method(task: Task, method: str, run: Path, steps: int, eval_every: int) -> float:
    """Train one method unless its train.done says it was; the launch's seconds."""
    timing_file = run / "train.done"
    if timing_file.exists():
        return json.loads(timing_file.read_text())["wall_s"]
    cmd = [sys.executable, "-m", "recipes.train"]
    cmd += train_overrides(task.base, method, steps, eval_every, run)
    print(f"{method}: training {steps} steps ...", flush=True)
    env = {**os.environ, "RAY_DEDUP_LOGS": "0"}
    train_s = run_logged(cmd, run / "train.log", env)
    timing_file.write_text(json.dumps({"wall_s": train_s}))
    return train_s


def evaluate_method(task: Task, method: str, run: Path) -> float:
    """eval.iterate over the method's checkpoints; the evaluation seconds of every invocation so far."""
    from eval.iterate import step_rows

    if task.report_only:
        eval_s = 0.0
    elif (run / "checkpoints").is_dir():
        cmd = [sys.executable, "-m", "eval.iterate", str(run / "checkpoints")]
        print(f"{method}: evaluating its checkpoints ...", flush=True)
        eval_s = run_logged([*cmd, *task.eval_args], run / "eval.log")
    elif step_rows(run / "eval"):  # checkpoints deleted to save disk; their scores are kept
        print(f"{method}: no checkpoints left; reusing the evaluations in {run / 'eval'}", flush=True)
        eval_s = 0.0
    else:
        sys.exit(f"{method}: {run / 'checkpoints'} is missing and nothing was evaluated")
    eval_file = run / "eval_wall.json"  # summed over invocations: a rerun adds only its own time
    eval_s += json.loads(eval_file.read_text())["wall_s"] if eval_file.exists() else 0.0
    eval_file.write_text(json.dumps({"wall_s": eval_s}))
    return eval_s


def method_result(task: Task, method: str, run: Path, initial: float, wall_s: float) -> tuple[dict, dict]:
    """The method's summary entry and its curves (held-out accuracy by step, train metrics)."""
    from eval.iterate import step_rows

    evaluated = step_rows(run / "eval")  # eval.iterate's own reader: complete summaries, by step
    acc = {0: initial} | {
        r["step"]: r["summary"]["per_question_average"]["accuracy"]["mean"] for r in evaluated
    }
    curves = {"acc": acc, "train": train_metrics(run)}
    last = max(acc)
    summary = {
        "initial_acc": initial,
        "final_acc": acc[last],
        "best_acc": max(acc.values()),
        "steps": last,
        "wall_s": round(wall_s, 1),
        "heldout_n": task.heldout_n,
    }
    print(
        f"{method}: held-out accuracy {initial:.3f} -> {acc[last]:.3f} (best {max(acc.values()):.3f}) "
        f"in {wall_s / 60:.1f} min",
        flush=True,
    )
    return summary, curves


def write_report(out: Path, summary: dict, curves: dict, heldout_n: int) -> None:
    """OUT/summary.json, summary.md and learning.png, and the table on stdout."""
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = summary_table(summary, curves)
    (out / "summary.md").write_text(table)
    plot(curves, out / "learning.png", heldout_n)
    from recipes.platforms.cpu import describe_cpu

    print(f"CPU: {describe_cpu()}")
    print(table, end="")
    print(f"done: {out}/summary.json, summary.md, learning.png")


def main(argv: list[str] | None = None) -> int:
    args, methods = parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = ["experiment=learning_cpu", f"model={args.model}", *args.overrides]
    heldout_dir = out / "heldout"
    heldout_n = write_heldout(base, heldout_dir, args.limit)
    from eval.iterate import step_rows
    from recipes.train import compose  # imported (quietly) by write_heldout

    cfg = compose(base)
    response_len = int(cfg.data.max_response_length)
    task = Task(
        out, base, heldout_n, eval_args(heldout_dir, response_len, args.eval_backend), args.report_only
    )
    print(f"task: toy arithmetic, {heldout_n} held-out questions; model {args.model}; {args.steps} steps")
    initial = initial_accuracy(task, str(cfg.actor_rollout_ref.model.path))

    summary, curves = {}, {}
    for method in methods:
        run = out / "runs" / method
        run.mkdir(parents=True, exist_ok=True)
        if args.report_only and not ((run / "train.done").exists() and step_rows(run / "eval")):
            print(f"{method}: not finished yet; left out", flush=True)
            continue
        train_s = train_method(task, method, run, args.steps, args.eval_every)
        eval_s = evaluate_method(task, method, run)
        summary[method], curves[method] = method_result(task, method, run, initial, train_s + eval_s)
    write_report(out, summary, curves, heldout_n)
    return 0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def first_last(train: list[dict], key: str, fmt: str) -> str:
    values = [t[key] for t in train if key in t]
    return f"{_mean(values[:5]):{fmt}} / {_mean(values[-5:]):{fmt}}"


def summary_table(summary: dict, curves: dict) -> str:
    """One row per method. Train columns: mean of the first 5 / last 5 steps."""
    lines = [
        "| method | held-out acc, step 0 | final | best | steps | train reward | entropy "
        "| response tokens | s/step | wall min |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method, s in summary.items():
        train = curves[method]["train"]

        per_step = sorted(t["timing_s/step"] for t in train[1:] if "timing_s/step" in t)
        median = per_step[len(per_step) // 2] if per_step else float("nan")
        lines.append(
            f"| {method} | {100 * s['initial_acc']:.1f}% | {100 * s['final_acc']:.1f}% "
            f"| {100 * s['best_acc']:.1f}% | {s['steps']} | {first_last(train, 'critic/score/mean', '.3f')} "
            f"| {first_last(train, 'actor/entropy', '.2f')} | {first_last(train, 'response_length/mean', '.0f')} "
            f"| {median:.1f} | {s['wall_s'] / 60:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(curves: dict, path: Path, heldout_n: int) -> None:
    os.environ.setdefault("MPLCONFIGDIR", str(path.parent / ".matplotlib"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_acc, ax_rew) = plt.subplots(1, 2, figsize=(11, 4.2))
    for method, c in curves.items():
        steps = sorted(c["acc"])
        ax_acc.plot(steps, [100 * c["acc"][s] for s in steps], marker="o", label=method)
        train = c["train"]
        reward = [t.get("critic/score/mean", float("nan")) for t in train]
        smooth = [_mean(reward[max(0, i - 4) : i + 1]) for i in range(len(reward))]  # 5-step mean
        (line,) = ax_rew.plot([t["step"] for t in train], smooth, label=f"{method} (5-step mean)")
        ax_rew.plot([t["step"] for t in train], reward, color=line.get_color(), alpha=0.25)
    ax_acc.set(
        xlabel="training step", ylabel="held-out greedy accuracy (%)", title=f"{heldout_n} held-out questions"
    )
    ax_rew.set(
        xlabel="training step", ylabel="mean train reward", title="train reward (faint: each step's mean)"
    )
    for ax in (ax_acc, ax_rew):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
