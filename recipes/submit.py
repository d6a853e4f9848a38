"""Submit a training run to Slurm with the resources its config names (docs/slurm.md#submit):

    python -m recipes.submit [--dry-run] [SBATCH OPTIONS] experiment=NAME [OVERRIDES...]

composes the config as `python -m recipes.train OVERRIDES` would, reads its Slurm resources,
`recipes.slurm` (nodes, GPUs per node, CPUs per task, time limit: configs/train.yaml says what
each is; a preset sets its own), and runs, from the submit directory,

    sbatch --job-name=NAME --nodes=N --gpus-per-node=G --cpus-per-task=C --time=T [SBATCH OPTIONS] \\
        scripts/slurm/train.sbatch OVERRIDES...

(sbatch's command-line options override train.sbatch's #SBATCH lines), with GPUS_PER_NODE set to
trainer.n_gpus_per_node in its environment (the GPUs each node's Ray declares; on platform=cpu
logical ones) unless you set it or name GPUs in your sbatch options. A resource named in your own
sbatch options (`--time=72:00:00`, `-N 2`) replaces the config's. `--dry-run` prints that command
and submits nothing. The Slurm log folder (`logs/`, train.sbatch's `--output`) is created unless
you pass `--output`. Write an sbatch option's value after `=` (`--export=ALL,X=1`) when it holds
an `=` itself: a separate word with `=` is read as the first Hydra override.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from recipes.settings import ConfigError, load, select

SECTION = "recipes.slurm"
SCRIPT = Path("scripts") / "slurm" / "train.sbatch"
# Slurm's time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]]
_TIME = re.compile(r"\d+(:\d\d?){0,2}|\d+-\d+(:\d\d?){0,2}|unlimited|infinite", re.I)


def _field(check: str | None, help: str) -> dataclasses.Field:
    return dataclasses.field(metadata={"check": check, "help": help})


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one job of the run asks Slurm for. configs/train.yaml holds the defaults (nodes and GPUs
    follow trainer.nnodes and trainer.n_gpus_per_node); each field is one sbatch option."""

    nodes: int = _field(">= 1", "sbatch --nodes: nodes, one Ray node each")
    gpus_per_node: int = _field(">= 0", "sbatch --gpus-per-node (0: platform=cpu's logical GPUs need none)")
    cpus_per_task: int = _field(">= 1", "sbatch --cpus-per-task: the CPUs of each node's Ray")
    time: str = _field(None, 'sbatch --time, Slurm\'s format ("48:00:00", "2-00:00:00")')

    def options(self) -> dict[str, str]:
        """sbatch's long option -> its value."""
        return {f"--{f.name.replace('_', '-')}": str(getattr(self, f.name)) for f in dataclasses.fields(self)}


def resources(cfg) -> Resources:
    """The run's Slurm resources (`recipes.slurm`), checked: one ConfigError naming the key."""
    from omegaconf import OmegaConf

    section = select(cfg, SECTION)
    values = OmegaConf.to_container(section, resolve=True) if section is not None else {}
    missing = [f.name for f in dataclasses.fields(Resources) if f.name not in values]
    if missing:  # configs/train.yaml declares them all: a config that deleted one
        raise ConfigError(f"{SECTION}: {', '.join(missing)} not set (configs/train.yaml declares each).")
    _check_time(values["time"])
    return load(Resources, values, SECTION)


def _check_time(time) -> None:
    key = f"{SECTION}.time"
    if not isinstance(time, str):  # YAML 1.1 reads an unquoted 48:00:00 as a number (of seconds)
        raise ConfigError(
            f'{key}={time!r} must be a string such as "48:00:00" (in a YAML file quoted: unquoted, '
            "YAML reads 48:00:00 as the number 172800)."
        )
    if not _TIME.fullmatch(time):
        raise ConfigError(
            f'{key}={time!r} is not a Slurm time limit: write hours:minutes:seconds ("48:00:00") or '
            'days-hours:minutes:seconds ("2-00:00:00").'
        )
    if re.fullmatch(r"\d+:\d\d?", time):  # Slurm reads it as minutes:seconds
        minutes = time.split(":")[0]
        raise ConfigError(
            f"{key}={time!r} is {minutes} minutes to Slurm (minutes:seconds): write "
            f'"{minutes}:00:00" for {minutes} hours, or "0:{time}" for {minutes} minutes.'
        )


# sbatch options that set what each of our options sets (long option, then its other spellings):
# a user's own replaces ours
_SAME = {
    "--job-name": ("-J",),
    "--nodes": ("-N",),
    "--gpus-per-node": ("--gpus", "-G", "--gres"),
    "--cpus-per-task": ("-c",),
    "--time": ("-t",),
    "--output": ("-o",),
}


def _sets(arg: str, long: str) -> bool:
    """`arg` (one sbatch argument) sets option `long` or one of its other spellings."""
    for name in (long, *_SAME[long]):
        if name == "--gres" and "gpu" not in arg:
            continue
        if arg == name or arg.startswith(name + "=") or (len(name) == 2 and arg.startswith(name)):
            return True
    return False


def split(argv: Sequence[str]) -> tuple[bool, list[str], list[str]]:
    """(dry run, sbatch options, Hydra overrides): the options are what comes before the first
    override (an argument with `=` or a `~key`, not starting with `-`)."""
    dry_run, options, overrides = False, [], []
    for arg in argv:
        if arg == "--dry-run":
            dry_run = True
        elif overrides or (not arg.startswith("-") and ("=" in arg or arg.startswith("~"))):
            if arg.startswith("-"):
                raise ConfigError(f"{arg}: sbatch options go before the Hydra overrides ({overrides[0]}).")
            overrides.append(arg)
        else:
            options.append(arg)
    if not overrides:
        given = f" (after the sbatch options {' '.join(options)})" if options else ""
        raise ConfigError(
            f"no Hydra override{given}: name what to train, experiment=NAME or model=... data=... "
            "(python -m recipes.submit --help)."
        )
    return dry_run, options, overrides


def sbatch_env(options: Sequence[str], cfg) -> dict[str, str]:
    """What the sbatch command adds to its environment (sbatch passes it to the job): train.sbatch's
    GPUS_PER_NODE, the GPUs Ray declares on each node, as the config counts them (without it
    train.sbatch takes Slurm's count, and on the CPU platform 1)."""
    if os.environ.get("GPUS_PER_NODE") or any(_sets(a, "--gpus-per-node") for a in options):
        return {}
    return {"GPUS_PER_NODE": str(select(cfg, "trainer.n_gpus_per_node"))}


def sbatch_command(options: Sequence[str], overrides: Sequence[str], res: Resources) -> list[str]:
    """The sbatch command line: the run's resources (those your options do not set), your
    options, train.sbatch and the overrides."""
    ours = dict(res.options())
    experiment = [o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")]
    if experiment:  # the job's name, and so its Slurm log's (logs/%x-%j.out)
        ours = {"--job-name": experiment[-1], **ours}
    ours = {k: v for k, v in ours.items() if not any(_sets(a, k) for a in options)}
    script = Path(os.environ["REPO_DIR"]) / SCRIPT if os.environ.get("REPO_DIR") else SCRIPT
    return ["sbatch", *(f"{k}={v}" for k, v in ours.items()), *options, str(script), *overrides]


def submit(argv: Sequence[str]) -> int:
    dry_run, options, overrides = split(argv)
    root = Path(os.environ.get("REPO_DIR") or ".")
    if not (root / "scripts" / "slurm" / "common.sh").is_file():
        raise ConfigError(
            f"{root.resolve()} is not the repository root: submit from there (the job finds the repository "
            "from its submit directory) or set REPO_DIR."
        )
    from recipes.compose import check_overrides

    try:
        cfg = check_overrides(list(overrides))
    except SystemExit as exc:  # a bad override: its one `config error:` line is printed
        return int(exc.code or 0)
    cmd, env = sbatch_command(options, overrides, resources(cfg)), sbatch_env(options, cfg)
    if dry_run:
        print(shlex.join([f"{k}={v}" for k, v in env.items()] + cmd), flush=True)
        return 0
    if not any(_sets(a, "--output") for a in options):
        Path("logs").mkdir(exist_ok=True)  # train.sbatch's --output=logs/%x-%j.out; Slurm makes no folder
    try:
        return subprocess.run(cmd, env={**os.environ, **env}).returncode
    except FileNotFoundError:
        print(
            "sbatch not found on PATH: submit from a Slurm login node (--dry-run prints the command).",
            file=sys.stderr,
            flush=True,
        )
        return 1


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        print(
            "\nexit status: 0 submitted (or printed); 1 sbatch failed or is missing; 2 a bad argument or config"
        )
        return 0
    try:
        return submit(argv)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
