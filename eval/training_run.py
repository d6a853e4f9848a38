"""What eval.iterate reads from, and adds to, the training run's folder (CHECKPOINT_ROOT's parent).

Read from its config.yaml (written by recipes.train): recipes.eval_protocol (`run_protocol`;
`apply_run_protocol` makes it the --protocol when none is given, saying so in one line) and
trainer.project_name (`run_project`). Added: each newly evaluated step's accuracies, in %, as the
scalars `eval/<benchmark>`, `eval/per-benchmark average` and `eval/per-question average` at the
training step, to its TensorBoard folder (`log_to_tensorboard`) and to its newest wandb run,
resumed by id (`wandb_run`, `log_to_wandb`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eval.request import EvalError
from recipes import protocols


def log_to_tensorboard(folder: Path, step: int, summary: dict) -> None:
    """A step's accuracies (%) as scalars `eval/<benchmark>`, `eval/per-benchmark average` and
    `eval/per-question average` at the training step, beside the training run's own curves."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    try:
        for name, value in eval_scalars(summary).items():
            writer.add_scalar(name, value, step)
    finally:
        writer.close()


def eval_scalars(summary: dict) -> dict[str, float]:
    """`eval/<benchmark>`, `eval/per-benchmark average`, `eval/per-question average` in %."""
    values = {name: b.get("accuracy") for name, b in summary["benchmarks"].items() if b.get("complete")}
    values["per-benchmark average"] = (summary.get("per_benchmark_average") or {}).get("accuracy")
    values["per-question average"] = (summary.get("per_question_average") or {}).get("accuracy")
    return {f"eval/{k}": 100 * v["mean"] for k, v in values.items() if v and v.get("mean") is not None}


def run_protocol(folder: Path) -> str | None:
    """recipes.eval_protocol of the run's resolved config (recipes.train writes config.yaml), or
    None: no config.yaml (checkpoints from elsewhere), an older run without the key, or null."""
    import yaml

    try:
        value = yaml.safe_load((folder / "config.yaml").read_text())["recipes"]["eval_protocol"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None
    return None if value is None else str(value)


def apply_run_protocol(args: argparse.Namespace, root: Path) -> None:
    """Without --protocol, the protocol the training run records (config.yaml beside the checkpoint
    root), said in one line; an unknown recorded name is an EvalError naming the file."""
    if args.protocol is not None:
        return
    name = run_protocol(root.parent)
    if name is None:
        return
    if name not in protocols.PROTOCOLS:
        raise EvalError(
            f"{root.parent / 'config.yaml'} records recipes.eval_protocol={name!r}, not a protocol "
            f"({protocols.names()}); give --protocol NAME or --protocol none"
        )
    args.protocol = name
    print(
        f"[iterate] protocol {name}: the training run's recipes.eval_protocol ({root.parent / 'config.yaml'}); "
        "--protocol NAME or --protocol none to evaluate otherwise",
        flush=True,
    )


def run_project(folder: Path) -> str:
    """trainer.project_name from the run's resolved config (recipes.train writes config.yaml)."""
    import yaml

    try:
        return str(yaml.safe_load((folder / "config.yaml").read_text())["trainer"]["project_name"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return "verl_math_recipes"


def wandb_run(folder: Path) -> tuple[str, str] | None:
    """(run id, mode) of the newest wandb run under `folder`/wandb (verl's wandb logger writes there
    when WANDB_DIR is the run's folder, as recipes.train sets it), or None."""
    runs = [p for kind in ("run-*", "offline-run-*") for p in (folder / "wandb").glob(kind) if p.is_dir()]
    runs.sort(key=lambda p: p.name.split("run-", 1)[1])  # by start time, online or offline
    if not runs:
        return None
    name = runs[-1].name
    run_id = name.split("run-", 1)[1][16:]  # after the %Y%m%d_%H%M%S start time
    # wandb adds -1, -2, ... to the folder of a run that starts in the same second as one of the
    # same id (the training run and its resumption); the run's file is run-<id>.wandb all the same
    files = list(runs[-1].glob("run-*.wandb"))
    if len(files) == 1:
        run_id = files[0].name[len("run-") : -len(".wandb")]
    return run_id, "offline" if name.startswith("offline-") else "online"


def log_to_wandb(folder: Path, project: str, step: int, summary: dict) -> bool:
    """A step's accuracies into the training run's wandb run (resumed by id), against
    `eval/training_step`. False when the run has no wandb folder."""
    found = wandb_run(folder)
    if found is None:
        return False
    import wandb

    run_id, mode = found
    run = wandb.init(
        id=run_id,
        project=project,
        dir=str(folder),
        resume="allow",
        mode=mode,
        settings=wandb.Settings(silent=True),
    )
    try:
        run.define_metric("eval/training_step")
        run.define_metric("eval/*", step_metric="eval/training_step")
        run.log({**eval_scalars(summary), "eval/training_step": step})
    finally:
        run.finish()
    return True
