"""Train with verl's own PPO trainer from our Hydra configs (configs/train.yaml extends verl's
`ppo_trainer`, so every verl key still works).

    python -m recipes.train experiment=demo_cpu                 # ~5 GRPO steps on a CPU (make demo)
    python -m recipes.train experiment=demo_cpu model=smollm2_135m
    python -m recipes.train platform=gpu model=qwen2_5_math_1_5b data=math_l3to5 method=[dapo]
    python -m recipes.train experiment=demo_cpu --cfg job      # print the resolved config, run nothing
    sbatch scripts/slurm/train.sbatch experiment=...            # multi-node GPUs (docs/slurm.md)

Hardware: `platform=cpu` needs nothing but a few GB of RAM (the demo's peak is in
docs/benchmarks.md); `platform=gpu` expects NVIDIA GPUs with vLLM installed
(`pip install -e .[gpu]`).

Before Ray starts it checks the config (`validate`, then verl's own `validate_config`), builds a
local model if one is named and missing, generates or checks the data, and for `platform=cpu`
exports the environment of recipes/platforms/cpu.py. A bad config fails here with one sentence
that names the key, not in a Ray worker minutes later.

Writes under `recipes.output_dir` (default `outputs/<project>/<experiment>/`):
  checkpoints/global_step_N/   verl checkpoints (a rerun resumes from the latest)
  metrics/<launch time>.jsonl  one JSON line per step (verl's `file` logger)
  logs/<launch time>.log       the console's lines and all verl, Ray and vLLM print (`tail -f` it)
  hydra/                       the composed config of the launch
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from recipes import checks, console, run_folder, verl_seam
from recipes.compose import (  # noqa: F401  (re-exported: `from recipes.train import compose`)
    CONFIG_DIR,
    check_overrides,
    compose,
    config_error,
    flag_args,
    hydra_args,
    planned_steps,
    record_choices,
    translate_overrides,
    verl_searchpath,
)
from recipes.console import held, quiet
from recipes.methods.configure import configure
from recipes.platforms import determinism
from recipes.platforms import registry as platforms
from recipes.platforms.hf_rollout import NAME as HF_ROLLOUT
from recipes.settings import ConfigError, select

LOCAL_MODELS = ("tiny", "smollm2_135m")  # built by recipes.tools.models, no hub access


# ------------------------------------------------------------------------------- preparation
def prepare(cfg: DictConfig) -> None:
    """Everything that must happen in the driver before Ray starts (mutates os.environ)."""
    os.environ.update(platforms.of(cfg).environment)  # platform=cpu: VERL_PLATFORM=cpu, ...
    from recipes.extensions import on_policy

    os.environ.update(on_policy.environment(cfg))
    determinism.prepare(cfg)
    cache = Path(select(cfg, "recipes.cache_dir"))
    model = select(cfg, "recipes.model")
    if model in LOCAL_MODELS:
        from recipes.tools.models import ensure_model

        ensure_model(model, cache_dir=cache)
    data = select(cfg, "recipes.data")
    if data == "toy_arithmetic":
        from recipes.files import Refused
        from recipes.tools.data import ensure_data

        # check_data validates every data file next, so do not validate here as well
        files = select(cfg, "data.train_files")
        try:
            ensure_data(data, out_dir=Path(files).parent, validate=False)
        except Refused:  # the folder holds files the data tool did not write: not replaced
            raise ConfigError(
                f"data.train_files={files}: its folder holds files that `python -m recipes.tools.data` did "
                "not write, and toy data would replace them; point it at a folder of its own."
            ) from None


# ------------------------------------------------------------------------------- main
def finished_step(cfg: DictConfig) -> int | None:
    """The checkpointed step when a resumable run has already reached trainer.total_training_steps
    (verl would resume there, train nothing and log nothing); else None."""
    total = select(cfg, "trainer.total_training_steps")
    if total is None or select(cfg, "trainer.resume_mode") != "auto":
        return None
    tracker = Path(select(cfg, "trainer.default_local_dir")) / "latest_checkpointed_iteration.txt"
    try:
        step = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None
    return step if step >= int(total) else None


def run(cfg: DictConfig) -> Path:
    """Validate, prepare, train. Returns the metrics file. Unless recipes.verbose, what verl, Ray
    and vLLM print goes to `<output_dir>/logs/<launch time>.log` (recipes/console.py)."""
    verbose = bool(select(cfg, "recipes.verbose"))
    env_before = dict(os.environ)
    with held(enabled=not verbose, expected=(ConfigError,)) as before_ray:
        notes = preflight(cfg)
    finished = finished_step(cfg)
    if finished is not None:
        return _already_trained(cfg, finished)
    metrics, log = _prepare_run_folder(cfg, before_ray)
    _train(cfg, notes, metrics, log, env_before, verbose)
    ckpt = Path(select(cfg, "trainer.default_local_dir"))
    _tell(log, f"done: metrics in {metrics}, checkpoints in {ckpt}, log in {log}")
    if not verbose:  # what Ray or a logger prints at interpreter exit goes to the log too
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    return metrics


def _already_trained(cfg: DictConfig, finished: int) -> Path:
    """Say that the run has reached its step count; its latest metrics file (else its folder)."""
    out = Path(select(cfg, "recipes.output_dir"))
    ckpt = Path(select(cfg, "trainer.default_local_dir"))
    earlier = sorted((out / "metrics").glob("*.jsonl"), key=lambda f: f.stat().st_mtime)
    where = f"metrics in {earlier[-1]}, " if earlier else ""
    print(
        f"done: already trained to step {finished} (trainer.total_training_steps); nothing to do: {where}"
        f"checkpoints in {ckpt}. Raise trainer.total_training_steps to go on, or set "
        "recipes.output_dir to start a new run.",
        flush=True,
    )
    return earlier[-1] if earlier else out


def _prepare_run_folder(cfg: DictConfig, before_ray: list[str]) -> tuple[Path, Path]:
    """This launch's metrics file and log (the log starts with what the checks printed), the
    resolved config, and the variables that point verl's loggers into the run folder."""
    out = Path(select(cfg, "recipes.output_dir"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    metrics = out / "metrics" / f"{stamp}.jsonl"
    log = out / "logs" / f"{stamp}.log"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(before_ray))
    global _HELD
    _HELD = console.hold(log)  # for this process's life: a live launch (python -m recipes.runs)
    (out / "config.yaml").write_text(run_folder.resolved_yaml(cfg))  # hydra/ has the composed one
    os.environ["VERL_FILE_LOGGER_PATH"] = str(metrics)
    # verl's TensorBoard and wandb loggers write under the current directory unless told; keep
    # every output of the run in its own folder (a variable you set yourself wins)
    os.environ.setdefault("TENSORBOARD_DIR", str(out / "tensorboard"))
    os.environ.setdefault("WANDB_DIR", str(out))
    return metrics, log


_HELD = None  # the lock on this launch's log (console.hold)


def _tell(log: Path, text: str) -> None:
    """A line on the terminal and in the run's log (which then holds all the console showed)."""
    print(text, flush=True)
    console.append(log, text)


def resume_from(cfg: DictConfig) -> Path | None:
    """The checkpoint verl will resume from, as verl's trainer finds it (`_load_checkpoint`):
    trainer.resume_from_path with resume_mode=resume_path; with auto, the step of the tracker file
    in trainer.default_local_dir when its folder exists; None for a start from scratch."""
    from recipes.checkpoints import latest_step, step_folder

    mode = select(cfg, "trainer.resume_mode")
    if mode == "resume_path":
        path = select(cfg, "trainer.resume_from_path")
        return Path(path) if isinstance(path, str) and "global_step_" in path else None
    if mode != "auto":
        return None
    root = Path(select(cfg, "trainer.default_local_dir"))
    step = latest_step(root)
    folder = Path(step_folder(root, step)) if step is not None else None
    return folder if folder is not None and folder.is_dir() else None


def _announce(cfg: DictConfig, notes: list[str], log: Path, verbose: bool) -> None:
    """The run's header on the terminal and in the log: what it trains, the checks' notes, the
    checkpoint it resumes from, where the log is."""
    from recipes.methods import registry

    out = Path(select(cfg, "recipes.output_dir"))
    methods = ",".join(registry.active_names(cfg))
    _tell(
        log,
        f"run: model {select(cfg, 'recipes.model') or select(cfg, 'actor_rollout_ref.model.path')}, "
        f"method [{methods}], data {select(cfg, 'recipes.data')}, "
        f"{select(cfg, 'trainer.total_training_steps') or select(cfg, 'trainer.total_epochs')} "
        f"{'steps' if select(cfg, 'trainer.total_training_steps') else 'epochs'}, output {out}",
    )
    for note in notes:
        _tell(log, note)
    resumed = resume_from(cfg)
    if resumed is not None:
        _tell(log, f"resume: from {resumed.name} ({resumed})")
    if not verbose:
        _tell(log, f"log: {log} (the resolved config is {out / 'config.yaml'}; -v prints everything here)")


def _session(cfg: DictConfig, say: Callable[[str], None]) -> contextlib.AbstractContextManager:
    """What the trainer runs inside (the CPU platform's vLLM session), after saying how the
    rollout and the training compute."""
    from recipes.extensions import on_policy

    on_policy_note = (
        "old log-probs from the update's own forward (on-policy)" if on_policy.active(cfg) else ""
    )
    hf = select(cfg, "actor_rollout_ref.rollout.name") == HF_ROLLOUT
    if hf:
        say(
            "rollout: transformers in a Ray actor (rollout.name=hf, no vLLM: the bare-GPU check), "
            f"{select(cfg, 'actor_rollout_ref.rollout.dtype')}"
        )
    if hf:
        if on_policy_note:
            say(f"training: {on_policy_note}")
        return contextlib.nullcontext()
    return platforms.of(cfg).session(cfg, say, on_policy_note)


def _train(
    cfg: DictConfig, notes: list[str], metrics: Path, log: Path, env_before: dict, verbose: bool
) -> None:
    """verl's PPO trainer, with the step table following its metrics file; Ray is shut down after."""
    # imported once the run folder's variables are set, and before the header, as a launch always did
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    _announce(cfg, notes, log, verbose)
    with quiet(log, enabled=not verbose) as say:
        stop = threading.Event()
        table = threading.Thread(
            target=console.follow, args=(metrics, stop, say, planned_steps(cfg)), daemon=True
        )
        if select(cfg, "recipes.step_table"):
            table.start()
        session = _session(cfg, say)
        try:
            with session:
                join_external_cluster(cfg, env_before)
                run_ppo(cfg, task_runner_class=TaskRunnerV1)
        finally:
            stop.set()
            if table.is_alive():
                table.join(timeout=5)
            if ray.is_initialized():
                ray.shutdown()


def preflight(cfg: DictConfig) -> list[str]:
    """Every check and preparation that must pass before Ray starts (raises ConfigError). Returns
    what the console should say about a decision made here (a fallback, the driver). Our own
    checks come first: they need no verl, so a bad setting is reported in seconds. verl's
    registrations are checked meanwhile in a fresh interpreter, as a Ray worker starts, and that
    result is waited for before anything is prepared."""
    seam = verl_seam.VerlSeam()
    checks.validate(cfg)
    notes = platforms.of(cfg).preflight(cfg)  # platform=gpu: the attention, the NVIDIA driver
    checks.verl_checks(cfg)
    seam.join()
    prepare(cfg)
    checks.check_model(cfg)
    checks.check_data(cfg)
    run_folder.check_same_run(cfg)
    return [n for n in notes if n]


# What a platform's config gives Ray when verl starts its own one-machine cluster; a cluster that
# is already running (RAY_ADDRESS, scripts/slurm/train.sbatch) was given its resources by
# `ray start`, and ray.init refuses them.
_LOCAL_RAY_ONLY = ("num_cpus", "num_gpus", "include_dashboard")


def join_external_cluster(cfg: DictConfig, env_before: dict) -> None:
    """When verl joins a running Ray cluster (RAY_ADDRESS), its workers inherit the environment of
    the `ray start` that made their node, not this process's: pass every variable recipes.train
    set (the CPU platform, recipes.deterministic, the vLLM session) as the job's runtime_env."""
    if not os.environ.get("RAY_ADDRESS"):
        return
    ours = {k: v for k, v in os.environ.items() if env_before.get(k) != v and k != "RAY_ADDRESS"}
    with open_dict(cfg):
        ray_init = cfg.ray_kwargs.ray_init
        for key in _LOCAL_RAY_ONLY:
            ray_init.pop(key, None)
        env = ray_init.runtime_env.get("env_vars") or {}
        ray_init.runtime_env.env_vars = {**ours, **env}


@hydra.main(config_path="../configs", config_name="train", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    choices, overrides = HydraConfig.get().runtime.choices, list(HydraConfig.get().overrides.task)
    record_choices(cfg, choices, overrides)
    try:
        configure(cfg, overrides, choices.get("experiment"))
        run(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)


def _launch(cfg: DictConfig | None) -> None:
    """Hydra's main, after the path checks (Hydra writes <output_dir>/hydra/ before our checks
    run): a launch that fails its checks (exit 2) removes the folders it created."""
    if cfg is None:
        main()
        return
    try:
        checks.check_paths(cfg)
    except ConfigError as exc:
        config_error(exc)
    out = Path(select(cfg, "recipes.output_dir")).expanduser()
    hydra_dir = out / "hydra"
    made = not hydra_dir.exists()
    new = [p for p in (out, *out.parents) if not p.exists()]  # outputs/<project>/ too, innermost first
    try:
        main()
    except SystemExit as exc:
        if exc.code == 2:
            import shutil

            if made:
                shutil.rmtree(hydra_dir, ignore_errors=True)
            for folder in new:  # ours alone: nothing that was there before the launch
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
        raise


VERBOSE_FLAGS = ("-v", "--verbose")


def usage() -> str:
    """`python -m recipes.train --help`: the groups and their options, read from configs/."""

    def names(group: str) -> str:
        return " ".join(sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml")))

    return f"""usage: python -m recipes.train [GROUP=OPTION ...] [KEY=VALUE ...] [-v]

Train with verl's PPO trainer from this project's Hydra configs (every verl key still works).

examples:
  python -m recipes.train experiment=demo_cpu                          # 5 GRPO steps on a CPU
  python -m recipes.train experiment=demo_cpu method=[dapo,prompt_aug]   # a baseline plus methods
  python -m recipes.train experiment=prompt_aug_qwen2_5_math_1_5b       # a paper preset (GPUs)
  python -m recipes.train platform=gpu model=qwen3_1_7b data=math method=[grpo,prorl] \\
      trainer.total_training_steps=500 trainer.save_freq=50
  python -m recipes.train experiment=demo_cpu --cfg job                 # print the config, run nothing

groups:
  experiment  {names("experiment")}
  method      a list: one baseline, then any methods ({names("method")}; python -m recipes.methods.registry)
  model       {names("model")}
  data        {names("data")}
  platform    {names("platform")}

common keys:
  trainer.total_training_steps=N  trainer.save_freq=N  trainer.test_freq=N  trainer.logger=[console,file,wandb]
  data.train_batch_size=N  actor_rollout_ref.rollout.n=N  actor_rollout_ref.actor.optim.lr=X
  recipes.output_dir=DIR  recipes.<method>.<setting>=V  (every method setting: python -m recipes.methods.registry)

  -v, --verbose   print everything verl, Ray and vLLM print (default: the run's log file)
  --check         run the checks a launch makes before Ray starts, and stop (exit 2 on an error);
                  takes -v, and --cfg job (then prints the config too)
  --cfg job       print the resolved config the run would use, and stop
  --hydra-help    Hydra's own help (every config group and key)

docs: README.md, docs/running.md, docs/methods.md, docs/settings.md"""


def print_config(cfg: DictConfig) -> None:
    """`--cfg job`: the config as the run uses it, resolved (docs/running.md), with the name and
    folders recipes.train gives a run that names none (Hydra's own printing has them null)."""
    sys.stdout.write(OmegaConf.to_yaml(cfg, resolve=True))
    sys.stdout.flush()


def check_only(args: list[str]) -> None:
    """`python -m recipes.train --check ARGS`: the checks a launch makes before Ray starts, and
    nothing else (scripts/slurm/train.sbatch runs it before `ray start`). Prints one line,
    `preflight: ok platform=P offline=0|1 done=0|1` (offline=1: the model is a local folder, so the
    Hub is not needed; done=1: the run has already reached its step count, so no cluster is
    needed), or `config error: ...` and exits 2. With -v, what verl prints on the way is shown;
    with --cfg job, the config the run would use is printed (resolved) before that line. Hydra's
    other flags start no launch to check: a config error."""
    verbose = any(a in VERBOSE_FLAGS for a in args)
    args = [a for a in args if a not in VERBOSE_FLAGS]
    try:
        overrides, flags = hydra_args(args)
        if set(flags) - {"--cfg", "--resolve"} or flags.get("--cfg", "job") != "job":
            raise ConfigError(
                f"--check takes overrides, -v and --cfg job, not {' '.join(flag_args(flags))} "
                "(Hydra's flags run no launch to check)."
            )
        cfg = check_overrides(overrides, verbose)
        with held(enabled=not verbose, expected=(ConfigError,)):
            notes = preflight(cfg)
    except ConfigError as exc:
        config_error(exc)
    if "--cfg" in flags:
        print_config(cfg)
    for note in notes:
        print(note, flush=True)
    local = Path(str(select(cfg, "actor_rollout_ref.model.path"))).expanduser().is_dir()
    done = finished_step(cfg) is not None
    print(
        f"preflight: ok platform={platforms.of(cfg).name} offline={int(local)} done={int(done)}",
        flush=True,
    )


if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(usage())
        sys.exit(0)
    if "--check" in sys.argv[1:]:
        check_only(translate_overrides([a for a in sys.argv[1:] if a != "--check"]))
        sys.exit(0)
    if "--hydra-help" in sys.argv[1:]:
        sys.argv[sys.argv.index("--hydra-help")] = "--help"
    verbose = any(a in VERBOSE_FLAGS for a in sys.argv[1:])
    if verbose:  # ours, not Hydra's: recipes.verbose=true
        sys.argv[1:] = [a for a in sys.argv[1:] if a not in VERBOSE_FLAGS] + ["recipes.verbose=true"]
    sys.argv[1:] = translate_overrides(sys.argv[1:])
    composed = check_overrides(sys.argv[1:], verbose)
    overrides, flags = hydra_args(sys.argv[1:])
    if composed is not None and flags.get("--cfg") == "job" and "--package" not in flags:
        print_config(composed)
        sys.exit(0)
    named = [a for a in overrides if a.startswith("trainer.experiment_name=")]
    if composed is not None and (not named or named[-1] == "trainer.experiment_name=null"):
        # the name record_choices gave the run, for Hydra's own folder (<output_dir>/hydra) too
        overrides = [a for a in overrides if a not in named]
        overrides.append(f"trainer.experiment_name={composed.trainer.experiment_name}")
    if not any(a.startswith("hydra.searchpath=") for a in overrides):
        overrides.insert(0, verl_searchpath())
    sys.argv[1:] = [*overrides, *flag_args(flags)]  # Hydra takes no override after a flag
    _launch(None if flags else composed)
