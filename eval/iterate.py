"""Evaluate every checkpoint of a training run: convert, evaluate, one table across steps, plots.

    python -m eval.iterate outputs/<project>/<experiment>/checkpoints                # every step
    python -m eval.iterate CHECKPOINT_ROOT --every 100                                # steps 100, 200, ...
    python -m eval.iterate CHECKPOINT_ROOT --steps 1000,2720
    python -m eval.iterate CHECKPOINT_ROOT --watch                                    # follow a live run
    sbatch scripts/slurm/eval_iterative.sbatch CHECKPOINT_ROOT [options]              # on a GPU node

Each selected `global_step_N`, in step order, is converted (eval/convert.py) into
HF_ROOT/global_step_N and evaluated by eval.run (every eval.run option applies) into
RESULTS_ROOT/global_step_N, in a child process of its own; then RESULTS_ROOT/steps.md, steps.json
and accuracy_vs_step.png are rewritten, and the step's accuracies are added to the run's
TensorBoard and wandb logs when it has them. Done work is not redone (resume as in eval.run). At
the end it prints the table and the best step by each average. Without --protocol, a run whose
config.yaml (beside CHECKPOINT_ROOT) records `recipes.eval_protocol` is evaluated under that
paper's protocol (recipes/protocols.py), said in one line; --protocol none evaluates it with eval.run's
defaults. --watch follows a run still
training until --until-step, or --idle-exit-s seconds without a new checkpoint. Defaults: HF_ROOT =
hf/ and RESULTS_ROOT = eval/ beside CHECKPOINT_ROOT, never inside a checkpoint or model folder.
RESULTS_ROOT and HF_ROOT hold only what eval.iterate and eval.convert write; one holding anything
else is refused before anything is written. Exit status: 0 all selected steps evaluated; 1 some
checkpoints were incomplete, malformed or damaged (skipped by name); 2 bad settings or a failed
evaluation. docs/eval.md has the outputs, the resume rules and the settings.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from eval import benchmarks as bm
from eval.backends import progress_bars
from eval.convert import (
    IncompleteCheckpoint,
    add_selection_arguments,
    check_hf_root,
    convert,
    outside,
    resolve,
    select_steps,
)
from eval.options import add_eval_arguments, eval_kwargs, int_in, number_in, protocol_note
from eval.request import EvalError
from eval.results import ResultsError, ensure_writable, pct
from eval.run import evaluate
from eval.step_table import PLOT, check_results_root, step_rows, write_run_outputs
from eval.summary import summary_settings
from eval.training_run import (
    apply_run_protocol,
    log_to_tensorboard,
    log_to_wandb,
    run_project,
    wandb_run,
)
from recipes.checkpoints import StepFolderError, default_hf_root, find_steps, latest_step

# The run's table and its training-run logs live in eval/step_table.py and eval/training_run.py;
# the names other code imported from here before the split stay importable.
__all__ = [
    "apply_run_protocol",
    "build_parser",
    "check_settings",
    "locate",
    "log_to_tensorboard",
    "log_to_wandb",
    "main",
    "parse_args",
    "run_project",
    "step_rows",
    "wandb_run",
]


def default_results_root(checkpoint_root: str | Path) -> Path:
    return Path(checkpoint_root).resolve().parent / "eval"


def evaluate_in_child(model: Path, out: Path, kwargs: dict) -> dict:
    """`eval.run.evaluate` in a fresh spawned process (GPU memory is freed when it exits)."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(evaluate, model, out, **kwargs).result()


def finished_summary(out: Path, model: Path, kwargs: dict) -> dict | None:
    """The summary in `out` if it is complete and made with exactly these settings (then the step
    needs no child process), else None."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if summary.get("complete") and summary.get("settings") == summary_settings(model, **kwargs):
        return summary
    return None


class IterateError(Exception):
    """Why the iteration stops with status 2, said in one sentence (printed as `error: ...`)."""


@dataclass(frozen=True)
class Targets:
    """Where one invocation reads checkpoints and writes models, results and logged accuracies."""

    root: Path  # CHECKPOINT_ROOT, resolved (holds global_step_N/)
    hf_root: Path  # converted models, HF_ROOT/global_step_N
    results_root: Path  # RESULTS_ROOT/global_step_N per step, steps.md, steps.json and the plot
    tensorboard: Path | None  # TensorBoard folder for each newly evaluated step (None: off)
    wandb_dir: Path | None  # folder whose newest wandb run gets each newly evaluated step (None: off)
    wandb_project: str  # that wandb run's project


@dataclass
class Progress:
    """What the iteration has done so far (across --watch polls)."""

    handled: set[int] = field(default_factory=set)  # evaluated, or incomplete and not watched again
    failed: dict[int, str] = field(default_factory=dict)  # step -> why its checkpoint is incomplete
    idle_since: float = field(default_factory=time.monotonic)  # when a step was last evaluated


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m eval.iterate",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python -m eval.iterate outputs/verl_math_recipes/my_run/checkpoints\n  python -m eval.iterate RUN/checkpoints --watch --until-step 500   # beside a live run\n(docs/eval.md)",
    )
    p.add_argument("checkpoint_root", help="a run's checkpoints/ folder (holding global_step_N/)")
    add_selection_arguments(p)
    p.add_argument(
        "--out",
        "--results-root",
        dest="out",
        help="results per step, table and plot (default: eval/ beside it; --results-root: its old name)",
    )
    p.add_argument("--watch", action="store_true", help="keep polling for new checkpoints of a live run")
    p.add_argument(
        "--poll-s",
        type=number_in(0.1),  # 0 was a busy loop
        default=300.0,
        help="--watch: seconds between polls, at least 0.1 (default 300)",
    )
    p.add_argument(
        "--idle-exit-s",
        type=number_in(0),
        default=7200.0,
        help="--watch: stop after this long without a new checkpoint (default 7200)",
    )
    p.add_argument("--until-step", type=int_in(0), help="--watch: stop once this step is evaluated")
    p.add_argument(
        "--tensorboard",
        default="auto",
        help="TensorBoard folder that gets each newly evaluated step's accuracies as eval/<benchmark> "
        "(default auto: the run's tensorboard/ folder when training logged there; none: off)",
    )
    p.add_argument(
        "--wandb-dir",
        default="auto",
        help="folder holding the training run's wandb/ runs: each newly evaluated step is logged to "
        "the newest one, resumed by its id (default auto: the run's own folder; none: off)",
    )
    p.add_argument(
        "--wandb-project",
        help="wandb project of that run (default: trainer.project_name of the run's config.yaml)",
    )
    add_eval_arguments(p)
    return p


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if any(
        a == "--results-root" or a.startswith("--results-root=")
        for a in (sys.argv[1:] if argv is None else argv)
    ):
        print("note: --results-root is now --out; the old name goes in the next release", file=sys.stderr)
    return args


def locate(args: argparse.Namespace, root: Path) -> Targets:
    """The folders from the options, `auto` resolved against the run's folder (CHECKPOINT_ROOT's parent)."""
    tensorboard = None if args.tensorboard == "none" else Path(args.tensorboard)
    if args.tensorboard == "auto":
        tensorboard = root.parent / "tensorboard" if (root.parent / "tensorboard").is_dir() else None
    wandb_dir = None if args.wandb_dir == "none" else Path(args.wandb_dir)
    if args.wandb_dir == "auto":
        wandb_dir = root.parent if wandb_run(root.parent) else None
    return Targets(
        root=root,
        hf_root=Path(args.hf_root).resolve() if args.hf_root else default_hf_root(root),
        results_root=Path(args.out).resolve() if args.out else default_results_root(root),
        tensorboard=tensorboard,
        wandb_dir=wandb_dir,
        wandb_project=args.wandb_project or run_project(root.parent),
    )


def check_settings(args: argparse.Namespace, targets: Targets) -> dict:
    """eval.run.evaluate's keyword arguments, once everything that can be checked before the first
    conversion is (EvalError, ResultsError or ValueError otherwise)."""
    root = targets.root
    kwargs = eval_kwargs(args)
    for name in kwargs["benchmarks"]:  # fail on a bad benchmark name now, not after a conversion
        if kwargs["data_dir"] is None and name not in bm.SPECS:
            raise EvalError(f"unknown benchmark {name!r}; known: {', '.join(bm.SPECS)} (or use --data-dir)")
    if not root.is_dir():
        raise EvalError(f"checkpoint root {root} is not a folder")
    if args.every is not None and args.steps:
        raise EvalError("give either --every or --steps, not both")
    outside(targets.hf_root, root, "--hf-root")
    outside(targets.results_root, root, "--out")
    if targets.hf_root == targets.results_root:
        raise EvalError(
            f"--hf-root and --out are both {targets.hf_root}: models and results go to separate folders"
        )
    if targets.tensorboard is not None and targets.tensorboard.exists() and not targets.tensorboard.is_dir():
        raise EvalError(f"--tensorboard {targets.tensorboard} is a file, not a folder")
    find_steps(root)  # two folders for one step, a step link that leads nowhere: say so now
    check_hf_root(targets.hf_root)
    check_results_root(targets.results_root, root)
    ensure_writable(targets.hf_root, "converted models")
    ensure_writable(targets.results_root, "results")
    return kwargs


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        root = resolve(args.checkpoint_root)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    targets = locate(args, root)
    try:
        apply_run_protocol(args, root)
        kwargs = check_settings(args, targets)
    except (EvalError, ResultsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    note = protocol_note(kwargs)
    if note:
        print(note, file=sys.stderr, flush=True)
    progress = Progress()
    try:
        follow(args, targets, kwargs, progress)
    except IterateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return report(targets, kwargs, progress)


def follow(args: argparse.Namespace, targets: Targets, kwargs: dict, progress: Progress) -> None:
    """Evaluate the selected steps once, or with --watch poll for new ones until told to stop."""
    while True:
        if evaluate_new_steps(args, targets, kwargs, progress):
            progress.idle_since = time.monotonic()
        if not args.watch or should_stop(args, progress):
            return
        time.sleep(args.poll_s)


def steps_to_evaluate(args: argparse.Namespace, root: Path) -> tuple[dict[int, Path], int | None, list[int]]:
    """({step: checkpoint folder}, the tracker's latest step or None, the selected steps in order)."""
    try:
        steps = find_steps(root)
    except (OSError, StepFolderError) as e:  # changed under --watch
        raise IterateError(str(e)) from e
    latest = latest_step(root)
    if args.steps:
        missing = sorted(set(args.steps) - set(steps))
        if missing and not args.watch:
            raise IterateError(f"no global_step_N folder for step(s) {missing} in {root}")
        return steps, latest, sorted(set(args.steps) & set(steps))
    return steps, latest, select_steps(list(steps), args.every)


def evaluate_new_steps(args: argparse.Namespace, targets: Targets, kwargs: dict, progress: Progress) -> bool:
    """Convert and evaluate every selected step not handled yet; True when one was evaluated."""
    steps, latest, chosen = steps_to_evaluate(args, targets.root)
    evaluated = False
    for k, step in enumerate(chosen, 1):
        if step in progress.handled:
            continue
        if args.watch and latest is not None and step > latest:
            continue  # still being written
        at = f"step {step} ({k}/{len(chosen)})"
        result = convert_step(args, targets, progress, step, steps[step], at, latest)
        if result is None:
            continue
        model, converted = result
        evaluate_step(targets, kwargs, progress, step, model, converted, at)
        evaluated = True
    return evaluated


def convert_step(
    args: argparse.Namespace,
    targets: Targets,
    progress: Progress,
    step: int,
    checkpoint: Path,
    at: str,
    latest: int | None,
) -> tuple[Path, bool] | None:
    """(model folder, whether it was converted now), or None for a step that cannot be converted
    (reported once, by name; without --watch it is not tried again)."""
    try:
        with progress_bars(not args.no_progress):  # transformers' "Writing model shards"
            model, converted = convert(
                checkpoint,
                targets.hf_root / f"global_step_{step}",
                trust_remote_code=args.trust_remote_code,
                progress=not args.no_progress,
            )
    except IncompleteCheckpoint as e:
        if args.watch and latest is None:
            return None  # no tracker: maybe still being written
        if progress.failed.get(step) != str(e):  # said once; --watch tries it again every poll
            print(f"[iterate] {at}: skipped: {e}", file=sys.stderr, flush=True)
        progress.failed[step] = str(e)
        if not args.watch:
            progress.handled.add(step)
        return None
    except ValueError as e:  # someone else's folder where the model would go (convert.check_target)
        raise IterateError(str(e)) from e
    progress.failed.pop(step, None)
    return model, converted


def evaluate_step(
    targets: Targets, kwargs: dict, progress: Progress, step: int, model: Path, converted: bool, at: str
) -> None:
    """Evaluate a converted step (in a child process, unless already evaluated with these settings),
    log a new result to TensorBoard and wandb, and rewrite the run's table and plot."""
    out = targets.results_root / f"global_step_{step}"
    summary = finished_summary(out, model, kwargs)
    print(
        f"[iterate] {at}: {'converted' if converted else 'already converted'} -> {model}; "
        + ("already evaluated" if summary else "evaluating"),
        flush=True,
    )
    if summary is None:
        try:
            summary = evaluate_in_child(model, out, {**kwargs, "quiet": True})
        except (EvalError, bm.BenchmarkError, ResultsError) as e:
            raise IterateError(f"step {step}: {e}") from e
        if targets.tensorboard is not None:
            log_to_tensorboard(targets.tensorboard, step, summary)
        if targets.wandb_dir is not None:
            log_to_wandb(targets.wandb_dir, targets.wandb_project, step, summary)
    progress.handled.add(step)
    avg_b, avg_q = summary["per_benchmark_average"], summary["per_question_average"]
    paper = summary.get("protocol")  # the paper's metric, as the paper averages it
    said = (
        f"; {paper['name']}'s {paper['metric']}: "
        + ", ".join(f"{label} {pct(v)}" for label, v in paper["values"].items())
        if paper
        else ""
    )
    print(
        f"[iterate] {at}: per-benchmark average {pct(avg_b['accuracy']['mean'])}, "
        f"per-question average {pct(avg_q['accuracy']['mean'])}{said}",
        flush=True,
    )
    write_run_outputs(targets.results_root, targets.root, progress.failed, kwargs)


def should_stop(args: argparse.Namespace, progress: Progress) -> bool:
    """--watch: stop after --until-step, after every --steps step, or after --idle-exit-s idle."""
    done = progress.handled
    if args.until_step is not None and any(s >= args.until_step for s in done if s not in progress.failed):
        return True
    if args.steps and set(args.steps) <= done:
        return True
    if time.monotonic() - progress.idle_since > args.idle_exit_s:
        print(f"[iterate] no new checkpoint for {args.idle_exit_s:.0f} s; stopping", flush=True)
        return True
    return False


def report(targets: Targets, kwargs: dict, progress: Progress) -> int:
    """Rewrite and print the run's table; the exit status (module docstring)."""
    table = write_run_outputs(targets.results_root, targets.root, progress.failed, kwargs)
    if table is None:
        print(f"[iterate] no step evaluated under {targets.root}", file=sys.stderr)
        return 1 if progress.failed else 2
    print(table, flush=True)
    print(
        f"[iterate] table {targets.results_root / 'steps.md'}, plot {targets.results_root / PLOT}", flush=True
    )
    return 1 if progress.failed else 0


if __name__ == "__main__":
    sys.exit(main())
