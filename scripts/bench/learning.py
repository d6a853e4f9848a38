"""Does it learn? Train each method on the same task for the same steps through verl's real trainer
on the CPU, and measure held-out accuracy before training and at every checkpoint, over seeds.

    .venv/bin/python scripts/bench/learning.py --methods grpo --out results/learning
    .venv/bin/python scripts/bench/learning.py --methods grpo,prompt_aug,ta_grpo,cw_grpo,prorl,all \
        --seeds 3 --out docs/results/learning
    .venv/bin/python scripts/bench/learning.py --methods grpo --steps 2 --eval-every 1 --model tiny --out DIR

The task: the toy arithmetic questions (2,000 train, 200 held-out test, none in both), the preset
configs/experiment/learning_cpu.yaml (SmolLM2-135M-Instruct), each method added to GRPO with the
settings of METHOD_OVERRIDES. Each seed (`--seeds N`) has its own data order and rollout seed; the
held-out questions are the same. For each method and seed: a `python -m recipes.train` launch into
OUT/runs/<method>[_seed<i>]/ with a checkpoint every --eval-every steps, then `python -m eval.iterate`
over the checkpoints (greedy) and, with --pass-k K, K samples per question at the training
temperature at the last checkpoint (K samples cost K greedy evaluations). The held-out sets and
the second grading rule: scripts/bench/learning_sets.py; the table, plot and mechanism metrics:
scripts/bench/learning_report.py. Writes OUT/summary.json, OUT/summary.md, OUT/learning.png and
OUT/heldout.png (held-out accuracy alone, the README's figure);
docs/learning.md says what each number means. A rerun with the same OUT keeps what is finished; a
finished run's numbers are OUT/runs/<run>/result.json, which OUT/.gitignore lets git keep (the
checkpoints and evaluations it does not), so the committed docs/results/learning/ goes on from
where the last machine stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_report import (  # noqa: E402
    MECHANISM,
    headline,
    machines,
    mean,
    mechanism,
    plot,
    plot_heldout,
    reset_lines,
    summary_table,
    verdicts,
)
from learning_sets import (  # noqa: E402  (the held-out sets and the second grading rule)
    BENCH,
    SETS,
    correct_by_question,
    heldout_answers,
    second_rule_accuracy,
    write_heldout,
)

METHODS = ("grpo", "prompt_aug", "ta_grpo", "cw_grpo", "prorl", "all")  # all: the four added together
# What each method changes for this benchmark, beyond its own configs/method/<name>.yaml.
METHOD_OVERRIDES = {
    "grpo": [],
    # the default per-prompt draw (each group shares one template, as in the paper); the longest
    # template takes ~300 of SmolLM2's tokens. A per-rollout draw did not learn here:
    # docs/results/learning/ablations/prompt_aug_per_rollout.json
    "prompt_aug": ["data.max_prompt_length=384"],
    # the toy set's three fixed rephrasings (recipes.tools.data.TOY_REPHRASINGS) per question
    "ta_grpo": [],
    "cw_grpo": [],
    # the report resets every few hundred steps of thousands; scaled to this run's length
    "prorl": ["recipes.prorl.reset_every=10"],
}
# the four together, each with the settings it uses alone
METHOD_OVERRIDES["all"] = [o for m in METHODS[1:-1] for o in METHOD_OVERRIDES[m]]


def method_list(method: str) -> str:
    if method == "all":
        return f"[grpo,{','.join(m for m in METHODS if m not in ('grpo', 'all'))}]"
    return "[grpo]" if method == "grpo" else f"[grpo,{method}]"


SEED = 42  # verl's defaults of data.seed and rollout.seed: seed 0 of the benchmark


def run_dir(out: Path, method: str, seed: int) -> Path:
    """Where a method's run of one seed goes (seed 0 where the single-seed benchmark put it)."""
    return out / "runs" / (method if seed == 0 else f"{method}_seed{seed}")


def train_overrides(
    base: list[str], method: str, steps: int, eval_every: int, run: Path, seed: int = 0
) -> list[str]:
    """The `recipes.train` overrides of one method's training launch: each seed shuffles the
    training data and seeds the rollouts differently; the held-out questions stay the same. The
    method's settings come first, so that an override given on the command line (in `base`) wins
    over them; the run's own (steps, folder, seeds) come last."""
    return [
        *METHOD_OVERRIDES[method],
        *base,
        f"method={method_list(method)}",
        f"trainer.total_training_steps={steps}",
        f"trainer.save_freq={eval_every}",
        f"recipes.output_dir={run}",
        f"data.seed={SEED + seed}",
        f"actor_rollout_ref.rollout.seed={SEED + seed}",
    ]


def run_logged(cmd: list[str], log: Path, env: dict | None = None) -> float:
    """Run `cmd` with its output in `log`; seconds it took. Exits with the log's tail on failure."""
    start = time.time()
    with log.open("a") as f:
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{log.read_text()[-3000:]}")
    return time.time() - start


class Sampling(NamedTuple):
    """pass@k's decoding: k samples per question from the training rollouts' distribution."""

    k: int  # 0: pass@k not measured
    temperature: float
    top_p: float  # eval.run's default is 0.95; the rollouts' (1.0) also spares vLLM's CPU sampler a sort


def sampled(greedy_args: list[str], sampling: Sampling) -> list[str]:
    """The evaluation arguments for pass@k: k samples per question at the training temperature
    and top-p instead of one greedy run."""
    args = list(greedy_args)
    args[args.index("--benchmarks") + 1] = BENCH  # the held-out questions only
    i = args.index("--repeats")
    k = sampling.k
    decoding = ["--decoding", "sample", "--n", str(k), "--k", f"1,{k}"]
    decoding += ["--temperature", str(sampling.temperature), "--top-p", str(sampling.top_p)]
    return [*args[:i], *decoding, *args[i + 2 :]]


def eval_args(heldout_dir: Path, max_new_tokens: int, backend: str) -> list[str]:
    return [
        "--backend",
        backend,
        "--data-dir",
        str(heldout_dir),
        "--benchmarks",
        ",".join(SETS),
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


def accuracy(summary: dict, name: str = BENCH) -> float:
    """One held-out set's accuracy in an eval.run summary (mean over its questions)."""
    return summary["benchmarks"][name]["accuracy"]["mean"]


# the training metrics the report reads (the rest stay in the run's metrics/ folder)
KEPT_METRICS = (
    "critic/score/mean",  # train reward
    "actor/entropy",
    "response_length/mean",
    "actor/grad_norm",
    "actor/pg_clipfrac",
    "prorl/reset",
    "timing_s/step",
    "timing_s/gen",
    "timing_s/update_actor",
)


def train_metrics(run: Path) -> list[dict]:
    records = {}
    for f in sorted((run / "metrics").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            records[r["step"]] = r["data"]  # a resumed launch repeats no step; the last wins
    return [
        {"step": s, **{k: records[s][k] for k in KEPT_METRICS if k in records[s]}} for s in sorted(records)
    ]


# A finished run's numbers, and the model's before training: all the report needs, small enough
# to commit (OUT/.gitignore keeps the rest out). A run folder holding one is not trained again.
RESULT, STEP0 = "result.json", "step0.json"


def save_result(path: Path, result: dict) -> None:
    """Written whole or not at all: a run stopped while writing it is run again, not unreadable."""
    part = path.with_suffix(".part")
    part.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    part.replace(path)


def load_result(path: Path) -> dict | None:
    """A saved result with its curves' steps as numbers again (JSON keys are strings)."""
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    for key in CURVES:
        if isinstance(result.get(key), dict):
            result[key] = {int(s): v for s, v in result[key].items()}
    return result


GITIGNORE = """# written by scripts/bench/learning.py: only the small results are kept in git
/*
!/.gitignore
!/summary.json
!/summary.md
!/learning.png
!/heldout.png
!/step0.json
!/ablations/
!/runs/
/runs/*/*
!/runs/*/result.json
"""


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The command line, checked; and the methods it names, in order."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", default="grpo", help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--out", type=Path, required=True, help="results folder (reused: finished work is kept)")
    p.add_argument("--steps", type=int, default=20, help="training steps per method (default 20)")
    p.add_argument(
        "--seeds", type=int, default=1, help="runs per method, each its own data order and rollout seed (1)"
    )
    p.add_argument("--eval-every", type=int, default=10, help="checkpoint and evaluate every N steps")
    p.add_argument("--model", default="smollm2_135m", help="configs/model/ name (default smollm2_135m)")
    p.add_argument("--limit", type=int, help="only the first N held-out questions (quick checks)")
    p.add_argument("--eval-backend", default="vllm", choices=("vllm", "hf"), help="eval backend (vllm)")
    p.add_argument(
        "--pass-k", type=int, default=8, help="pass@k at the training temperature, k samples (0: off; 8)"
    )
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
    if min(args.steps, args.eval_every, args.seeds, args.limit or 1) < 1 or args.pass_k < 0:
        p.error("--steps, --eval-every, --seeds and --limit must be >= 1, --pass-k >= 0")
    return args, methods


class Task(NamedTuple):
    """What every method shares: the launch overrides, the held-out questions, the eval settings."""

    out: Path
    base: list[str]  # recipes.train overrides of every launch
    heldout_n: int
    eval_args: list[str]  # eval.run's and eval.iterate's
    report_only: bool
    sampling: Sampling  # pass@k's k, temperature and top-p


def train_method(task: Task, method: str, run: Path, steps: int, eval_every: int, seed: int = 0) -> dict:
    """Train one method unless its train.done says it was; its train.done: the launch's seconds and
    the CPU it trained on (seconds a step compare only between runs of one CPU)."""
    timing_file = run / "train.done"
    if timing_file.exists():
        return json.loads(timing_file.read_text())
    cmd = [sys.executable, "-m", "recipes.train"]
    cmd += train_overrides(task.base, method, steps, eval_every, run, seed)
    print(f"{run.name}: training {steps} steps ...", flush=True)
    env = {**os.environ, "RAY_DEDUP_LOGS": "0"}
    train_s = run_logged(cmd, run / "train.log", env)
    from recipes.platforms.cpu import describe_cpu

    done = {"wall_s": train_s, "cpu": describe_cpu()}
    timing_file.write_text(json.dumps(done))
    return done


def evaluate_method(task: Task, method: str, run: Path, last_step: int) -> float:
    """eval.iterate over the method's checkpoints (pass@k at the last one only: k samples per
    question cost k times a greedy evaluation); the evaluation seconds of every invocation so far."""
    from eval.step_table import step_rows

    if task.report_only:
        eval_s = 0.0
    elif (run / "checkpoints").is_dir():
        cmd = [sys.executable, "-m", "eval.iterate", str(run / "checkpoints")]
        print(f"{method}: evaluating its checkpoints ...", flush=True)
        eval_s = run_logged([*cmd, *task.eval_args], run / "eval.log")
        if task.sampling.k:
            args = [*sampled(task.eval_args, task.sampling), "--out", str(run / "eval_pass")]
            args += ["--steps", str(last_step)]
            eval_s += run_logged([*cmd, *args], run / "eval.log")
    elif step_rows(run / "eval"):  # checkpoints deleted to save disk; their scores are kept
        print(f"{method}: no checkpoints left; reusing the evaluations in {run / 'eval'}", flush=True)
        eval_s = 0.0
    else:
        sys.exit(f"{method}: {run / 'checkpoints'} is missing and nothing was evaluated")
    eval_file = run / "eval_wall.json"  # summed over invocations: a rerun adds only its own time
    eval_s += json.loads(eval_file.read_text())["wall_s"] if eval_file.exists() else 0.0
    eval_file.write_text(json.dumps({"wall_s": eval_s}))
    return eval_s


def scores(folder: Path, answers: dict[str, str]) -> dict[str, float]:
    """One evaluated model's numbers (an eval.run results folder): accuracy on each held-out set
    under the training reward's rule, and on toy_heldout under the second rule."""
    summary = json.loads((folder / "summary.json").read_text())
    return {
        "acc": accuracy(summary),
        "acc_rephrased": accuracy(summary, "toy_rephrased"),
        "acc_ood": accuracy(summary, "toy_ood"),
        "acc_second_rule": second_rule_accuracy(folder / "samples.jsonl", answers),
    }


def pass_at_k(folder: Path, k: int) -> float:
    summary = json.loads((folder / "summary.json").read_text())
    return summary["benchmarks"][BENCH]["pass_at_k"][str(k)]


def correctness(samples: Path, answers: dict[str, str]) -> dict[str, dict[str, float]]:
    """Each held-out question's correctness under either rule: what the paired differences pair."""
    return {"correct": correct_by_question(samples), "correct_second": correct_by_question(samples, answers)}


def sampled_otherwise(folder: Path, sampling: Sampling) -> bool:
    """Whether an eval.run folder holds samples of another temperature or top-p than `sampling`."""
    config = folder / "config.json"
    if not config.exists():
        return False
    settings = json.loads(config.read_text())
    return (settings.get("temperature"), settings.get("top_p")) != (sampling.temperature, sampling.top_p)


def step0(task: Task, model_path: str, answers: dict[str, str]) -> dict:
    """The model before training, evaluated once (greedy, and k samples for pass@k): step 0 of
    every method's curves."""
    saved = load_result(task.out / STEP0)
    sampling = task.sampling._asdict()
    if (
        saved is not None
        and "correct_second" in saved
        and (not task.sampling.k or saved.get("sampling") == sampling)
    ):
        return saved  # else: evaluate what is missing (pass@k again, if its settings changed)
    if task.report_only:
        sys.exit(
            f"{task.out}: the model before training has not been evaluated yet (run without --report-only)"
        )
    folder, passes = task.out / "eval_step0", task.out / "eval_step0_pass"
    cmd = [sys.executable, "-m", "eval.run", "--model", model_path]
    if not (folder / "summary.json").exists():
        run_logged([*cmd, "--out", str(folder), *task.eval_args], task.out / "eval_step0.log")
    if task.sampling.k:
        if sampled_otherwise(passes, task.sampling):
            shutil.rmtree(passes)
        if not (passes / "summary.json").exists():
            args = sampled(task.eval_args, task.sampling)
            run_logged([*cmd, "--out", str(passes), *args], task.out / "eval_step0.log")
    result = {**scores(folder, answers), **correctness(folder / "samples.jsonl", answers)}
    if task.sampling.k:
        result |= {"pass_k": pass_at_k(passes, task.sampling.k), "sampling": sampling}
    save_result(task.out / STEP0, result)
    return result


def seed_result(task: Task, run: Path, initial: dict, answers: dict[str, str]) -> dict:
    """One method's run of one seed: each curve by step (step 0 is `initial`), the train metrics,
    and each held-out question's correctness at the last step."""
    from eval.step_table import step_rows

    # eval.iterate's own reader: the steps whose summaries are complete
    folders = {r["step"]: run / "eval" / f"global_step_{r['step']}" for r in step_rows(run / "eval")}
    by_step = {0: initial} | {s: scores(f, answers) for s, f in folders.items()}
    result = {key: {s: v[key] for s, v in by_step.items()} for key in CURVES if key != "pass_k"}
    last = folders[max(folders)] / "samples.jsonl" if folders else None
    result |= correctness(last, answers) if last else {k: initial[k] for k in ("correct", "correct_second")}
    result["train"] = train_metrics(run)
    if task.sampling.k:  # pass@k at the training temperature and top-p
        passes = {
            r["step"]: run / "eval_pass" / f"global_step_{r['step']}" for r in step_rows(run / "eval_pass")
        }
        result["pass_k"] = {0: initial["pass_k"]} | {
            s: pass_at_k(f, task.sampling.k) for s, f in passes.items()
        }
    return result


CURVES = {  # each curve's key in summary.json
    "acc": "acc_by_step",  # toy_heldout, the training reward's rule
    "acc_second_rule": "acc_second_rule_by_step",  # toy_heldout, the second rule
    "acc_rephrased": "acc_rephrased_by_step",  # toy_rephrased
    "acc_ood": "acc_ood_by_step",  # toy_ood
    "pass_k": "pass@k_by_step",  # toy_heldout, k samples at the training temperature
}


def spread(by_seed: list[dict[int, float]]) -> dict[str, dict[str, float]]:
    """Step -> mean, min and max over the seeds, at the steps every seed reached."""
    steps = sorted(set.intersection(*(set(c) for c in by_seed)))
    return {
        str(s): {
            "mean": mean([c[s] for c in by_seed]),
            "min": min(c[s] for c in by_seed),
            "max": max(c[s] for c in by_seed),
        }
        for s in steps
    }


def method_summary(task: Task, name: str, seeds: list[dict]) -> dict:
    """A method's summary entry: each curve's mean and range over seeds, each seed's own curves."""
    wall_s = sum(r["wall_s"] for r in seeds)
    curves = {key: spread([r[key] for r in seeds]) for key in CURVES if key in seeds[0]}
    acc = {int(s): v["mean"] for s, v in curves["acc"].items()}
    last = max(acc)
    summary = {
        "initial_acc": acc[0],
        "final_acc": acc[last],
        "final_acc_range": [curves["acc"][str(last)]["min"], curves["acc"][str(last)]["max"]],
        "best_acc": max(acc.values()),
        "steps": last,
        "wall_s": round(wall_s, 1),
        "heldout_n": task.heldout_n,
        "n_seeds": len(seeds),
        **{CURVES[key]: c for key, c in curves.items()},
        "pass@k_sampling": task.sampling._asdict(),  # k, temperature, top-p of pass@k_by_step
        "seeds": [
            {CURVES[k]: {str(s): v for s, v in sorted(r[k].items())} for k in CURVES if k in r} for r in seeds
        ],
        "mechanism": mechanism_summary([mechanism(r) for r in seeds]),
    }
    print(
        f"{name}: held-out accuracy {acc[0]:.3f} -> {acc[last]:.3f} (best {max(acc.values()):.3f}; "
        f"{len(seeds)} seed(s)) in {wall_s / 60:.1f} min",
        flush=True,
    )
    return summary


def mechanism_summary(per_seed: list[dict]) -> dict:
    """Each mechanism metric over seeds: curves by step (mean, min, max), the scalars' range, and
    ProRL's resets seed by seed (only when a run reset)."""
    out = {f"{name}_by_step": spread([m[name] for m in per_seed]) for name in MECHANISM}
    for name in ("grad_norm_std", "clipfrac_mean"):
        values = [m[name] for m in per_seed]
        out[name] = {"mean": mean(values), "min": min(values), "max": max(values)}
    if any(m["prorl_resets"] for m in per_seed):
        out["prorl_resets"] = [m["prorl_resets"] for m in per_seed]
    return out


def paired_difference(
    method: list[dict], grpo: list[dict], rule: str = "correct", n_boot: int = 2000
) -> dict:
    """The method's final held-out accuracy minus GRPO's under one rule (`correct`: the training
    reward's, `correct_second`), seed by seed (same seed, same data order), averaged over seeds; a
    95% bootstrap interval that resamples the held-out questions and, with two seeds or more, the
    seed pairs too, so that it covers seed-to-seed spread as well as the choice of questions."""
    import numpy as np

    pairs = list(zip(method, grpo, strict=False))
    ids = sorted(pairs[0][0][rule])
    diffs = np.array([[m[rule][q] - g[rule][q] for q in ids] for m, g in pairs])  # seeds x questions
    rng = np.random.default_rng(0)
    questions = rng.integers(0, len(ids), size=(n_boot, 1, len(ids)))
    seeds = rng.integers(0, len(pairs), size=(n_boot, len(pairs), 1))
    boot = diffs[seeds, questions].mean(axis=(1, 2))
    low, high = np.percentile(boot, [2.5, 97.5])
    return {
        "diff": float(diffs.mean()),
        "per_seed": [float(d) for d in diffs.mean(axis=1)],
        "ci95": [float(low), float(high)],
        "beyond_noise": bool(low > 0 or high < 0),
    }


def write_report(out: Path, summary: dict, results: dict, heldout_n: int) -> None:
    """OUT/summary.json, summary.md, learning.png and heldout.png, and the table on stdout."""
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = summary_table(summary, results)
    verdict = verdicts(summary)  # the final held-out difference to GRPO, method by method
    resets = reset_lines(summary, results)  # ProRL: before and after each reset
    short = headline(summary)  # the README's table
    (out / "summary.md").write_text(
        short
        + f"\nIn full (train columns: mean of the first 5 / last 5 steps):\n\n{table}"
        + (f"\nFinal held-out accuracy minus GRPO's:\n\n{verdict}" if verdict else "")
        + (f"\nProRL's resets:\n\n{resets}" if resets else "")
        + f"\nEach run (s/step compares runs of one CPU only):\n\n{machines(results)}"
    )
    plot(summary, results, out / "learning.png", heldout_n)
    plot_heldout(summary, out / "heldout.png", heldout_n)
    from recipes.platforms.cpu import describe_cpu

    print(f"CPU: {describe_cpu()}")
    print(short + verdict, end="")
    print(f"done: {out}/summary.json, summary.md, learning.png, heldout.png")


def main(argv: list[str] | None = None) -> int:
    args, methods = parse_args(argv)
    out = args.out.resolve()
    base = ["experiment=learning_cpu", f"model={args.model}", *args.overrides]
    from recipes.compose import check_overrides

    # every launch's overrides compose before anything runs (a bad one: its one line, exit 2; an
    # override of a method's setting needs that method in each launch); the held-out questions
    # and the evaluation's settings are the same in all, read from the first
    first = train_overrides(base, methods[0], args.steps, args.eval_every, run_dir(out, methods[0], 0))
    cfg = check_overrides(first)
    for method in methods[1:]:
        check_overrides(train_overrides(base, method, args.steps, args.eval_every, run_dir(out, method, 0)))
    out.mkdir(parents=True, exist_ok=True)
    heldout_dir = out / "heldout"
    heldout_n = write_heldout(first, heldout_dir, args.limit)
    from eval.step_table import step_rows

    response_len = int(cfg.data.max_response_length)
    greedy = eval_args(heldout_dir, response_len, args.eval_backend)
    rollout = cfg.actor_rollout_ref.rollout
    sampling = Sampling(args.pass_k, float(rollout.temperature), float(rollout.top_p))
    task = Task(out, base, heldout_n, greedy, args.report_only, sampling)
    print(f"task: toy arithmetic, {heldout_n} held-out questions; model {args.model}; {args.steps} steps")
    (out / ".gitignore").write_text(GITIGNORE)
    answers = heldout_answers(heldout_dir)
    initial = step0(task, str(cfg.actor_rollout_ref.model.path), answers)
    print(f"step 0 (before training): held-out accuracy {initial['acc']:.3f}", flush=True)

    summary, results = {}, {}
    for method in methods:
        done = []
        for seed in range(args.seeds):
            run = run_dir(out, method, seed)
            result = load_result(run / RESULT)
            if result is not None and max(result["acc"]) != args.steps:
                sys.exit(
                    f"{run}: its result.json is of a {max(result['acc'])}-step run, not --steps {args.steps}"
                )
            if result is None:
                if args.report_only and not ((run / "train.done").exists() and step_rows(run / "eval")):
                    print(f"{run.name}: not finished yet; left out", flush=True)
                    continue
                run.mkdir(parents=True, exist_ok=True)
                trained = train_method(task, method, run, args.steps, args.eval_every, seed)
                wall_s = trained["wall_s"] + evaluate_method(task, method, run, args.steps)
                result = {**seed_result(task, run, initial, answers), "wall_s": wall_s}
                result["cpu"] = trained.get("cpu")  # None: trained before the CPU was recorded
                if not args.report_only:
                    save_result(run / RESULT, result)
            done.append(result | {"run": run.name})
        if done:
            summary[method], results[method] = method_summary(task, method, done), done
    if "grpo" in results:
        for method in summary.keys() - {"grpo"}:
            summary[method]["vs_grpo"] = paired_difference(results[method], results["grpo"])
            summary[method]["vs_grpo_second_rule"] = paired_difference(
                results[method], results["grpo"], "correct_second"
            )
    write_report(out, summary, results, heldout_n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
