"""Every check `python -m recipes.train` makes before Ray starts, each failing with one sentence
(ConfigError) that names the key, the file or the row: the config (`validate`: paths, added keys,
every key's type and range, the chosen model, data and methods, the CPU rollout), verl's own checks
(`verl_checks`), the model (`check_model`) and the data (`check_data`); that verl holds our
registrations is recipes/verl_seam.py's. recipes/train.py runs them around its preparation."""

from __future__ import annotations

import ast
import fnmatch
import functools
import json
import math
import operator
import os
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig

from recipes.platforms import determinism
from recipes.platforms import registry as platforms
from recipes.platforms.hf_rollout import NAME as HF_ROLLOUT
from recipes.settings import RANGES, ConfigError, select, type_name, type_ok

# ------------------------------------------------------------------- every key's type and range
# The type of every key in the config comes from verl's own declarations, so that a new verl key
# is checked without a line here: a section verl builds into a config dataclass (one with
# `_target_`, or a field annotated with one) by that dataclass's field annotations, read from
# verl's source (a bad setting is reported before verl's slow import); a key verl
# keeps in a plain dict (trainer, data, ...) by its default in verl's generated ppo_trainer yaml and
# in configs/train.yaml (an int default: an integer; a null default in either: null too). The two
# tables say what no declaration does.
RANGES_OF: dict[str, str] = {  # key (a pattern) -> its allowed range (recipes/settings.py RANGES)
    "data.train_batch_size": ">= 1",
    "data.gen_batch_size": ">= 1",
    "data.max_prompt_length": ">= 1",
    "data.max_response_length": ">= 1",
    "data.dataloader_num_workers": ">= 0",
    "actor_rollout_ref.rollout.n": ">= 1",
    "actor_rollout_ref.rollout.temperature": ">= 0",
    "actor_rollout_ref.rollout.top_p": "in (0, 1]",
    "actor_rollout_ref.actor.optim.lr": "> 0",
    "actor_rollout_ref.actor.ppo_mini_batch_size": ">= 1",
    "actor_rollout_ref.actor.ppo_epochs": ">= 1",
    "*micro_batch_size*": ">= 1",  # verl divides by them
    "*max_token_len_per_gpu": ">= 1",
    "trainer.total_epochs": ">= 1",
    "trainer.total_training_steps": ">= 1",
    "trainer.n_gpus_per_node": ">= 1",
    "trainer.nnodes": ">= 1",
    "trainer.log_val_generations": ">= 0",
    "recipes.rollout_poll_s": "> 0",
}
TYPES: dict[str, object] = {  # a plain key whose defaults are null or do not say all it takes
    "data.train_files": str | list,  # one file or a list of them (check_files)
    "data.val_files": str | list,
    "trainer.logger": str | list,
    "trainer.total_training_steps": int | None,  # null: epochs x batches
    "trainer.resume_mode": Literal["auto", "disable", "resume_path"],  # verl logs any other and goes on
    "trainer.max_actor_ckpt_to_keep": int | None,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": int | None,
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": int | None,
    "ray_kwargs.ray_init.num_cpus": int | None,
    "trainer.resume_from_path": str | None,
    "data.gen_batch_size": int | None,
}
# Sections whose keys verl reads by name and whose unknown keys it ignores silently: a key added
# there with `+` (as Hydra suggests for a key it does not know) is almost always a misspelling.
CLOSED_SECTIONS = ("trainer", "trainer.v1", "data", "actor_rollout_ref.model", "recipes")
CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def _verl_root() -> Path:
    """verl's installed package folder, found without importing it."""
    import importlib.util

    return Path(importlib.util.find_spec("verl").submodule_search_locations[0])


@functools.cache
def _verl_classes(module: str) -> dict[str, ast.ClassDef]:
    """The classes of verl's `module` (for a package, of its own files), by name, from its source."""
    path = _verl_root().joinpath(*module.split(".")[1:])
    files = sorted(path.glob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    trees = [ast.parse(f.read_text()) for f in files if f.is_file()]
    return {c.name: c for tree in trees for c in tree.body if isinstance(c, ast.ClassDef)}


@functools.cache
def _yaml_defaults() -> tuple[dict, dict]:
    """verl's defaults (its ppo_trainer config with every group expanded), and ours."""
    import yaml

    verl = _verl_root() / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    return yaml.safe_load(verl.read_text()), yaml.safe_load((CONFIG_DIR / "train.yaml").read_text())


_SCALARS = {"int": int, "float": float, "bool": bool, "str": str, "dict": dict, "list": list, "tuple": list}


class _Schema:
    """The declared type of each key of one config: `kinds(cfg)` walks it."""

    def __init__(self, cfg: dict):
        targets = [t for t in _values(cfg, "_target_") if isinstance(t, str) and t.startswith("verl.")]
        self.classes: dict[str, ast.ClassDef] = {}
        for module in sorted({t.rpartition(".")[0] for t in targets}):
            for name, node in _verl_classes(module).items():
                self.classes.setdefault(name, node)

    def fields(self, name: str) -> dict[str, ast.AnnAssign]:
        """A config class's annotated fields, its bases' first."""
        node = self.classes.get(name)
        if node is None:
            return {}
        out = {}
        for base in node.bases:
            if isinstance(base, ast.Name):
                out.update(self.fields(base.id))
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if not stmt.target.id.startswith("_") and "ClassVar" not in ast.unparse(stmt.annotation):
                    out[stmt.target.id] = stmt
        return out

    def field_kind(self, field: ast.AnnAssign) -> tuple[object, str | None]:
        """A field's annotation, or null too where its default is (`x: int = None`)."""
        kind, nested = self.kind(field.annotation)
        default = field.value
        if isinstance(default, ast.Call) and ast.unparse(default.func) in ("field", "dataclasses.field"):
            default = next((k.value for k in default.keywords if k.arg == "default"), None)
        if isinstance(default, ast.Constant) and default.value is None and kind is not Any:
            kind = kind | None
        return kind, nested

    def kind(self, node: ast.expr) -> tuple[object, str | None]:
        """An annotation as settings.type_ok checks it (a nested config is a mapping), and the class
        of a nested config (None if it is not one). What is not understood here is Any."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a forward reference
            node = ast.parse(node.value, mode="eval").body
        if isinstance(node, ast.Constant) and node.value is None:
            return type(None), None
        if isinstance(node, ast.Name):
            return (dict, node.id) if node.id in self.classes else (_SCALARS.get(node.id, Any), None)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return _union([self.kind(node.left), self.kind(node.right)])
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            outer = node.value.id
            if outer == "Optional":
                return _union([self.kind(args[0]), (type(None), None)])
            if outer == "Union":
                return _union([self.kind(a) for a in args])
            if outer == "Literal":
                return Literal[tuple(ast.literal_eval(a) for a in args)], None
            if outer in _SCALARS:
                return _SCALARS[outer], None
        return Any, None

    def kinds(self, node: dict, path: str = "", cls: str | None = None, defaults=((), ())):
        """(key, type, value) of every key under `node`, depth first: by the fields of its config class
        (its `_target_`, else `cls`), else by the defaults (verl's, ours) at the same place."""
        target = node.get("_target_")
        cls = target.rpartition(".")[2] if isinstance(target, str) else cls
        fields = self.fields(cls) if cls else {}
        for name, value in node.items():
            key = f"{path}.{name}" if path else name
            below = tuple(d[name] for d in defaults if isinstance(d, dict) and name in d)
            if name in fields:
                kind, nested = self.field_kind(fields[name])
                if None in below and kind is not Any:  # verl's own yaml writes null there
                    kind = kind | None
            else:
                kind, nested = TYPES.get(key) or _default_kind(below), None
            if name != "_target_":
                yield key, kind, value
            if isinstance(value, dict):
                yield from self.kinds(value, key, nested, below)


def _union(parts: list[tuple[object, str | None]]) -> tuple[object, str | None]:
    kinds = [k for k, _ in parts]
    nested = next((n for _, n in parts if n), None)
    return (Any if Any in kinds else functools.reduce(operator.or_, kinds)), nested


def _default_kind(defaults: tuple) -> object:
    """The type the defaults at one place say (Any where none says one, or they differ)."""
    kinds = {
        dict if isinstance(d, dict) else list if isinstance(d, list) else type(d)
        for d in defaults
        if d is not None and not (isinstance(d, str) and (d.startswith("${") or d == "???"))
    }
    if len(kinds) != 1:
        return Any
    kind = kinds.pop()
    return kind | None if None in defaults else kind


def _values(node, name: str):
    """Every value of key `name` in a nested container."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == name:
                yield value
            yield from _values(value, name)
    elif isinstance(node, list):
        for value in node:
            yield from _values(value, name)


def _fits(value, kind) -> bool:
    if type_ok(value, kind):
        return not (isinstance(value, float) and math.isnan(value))
    # Hydra reads `trainer.experiment_name=2024` as a number: a setting that is only ever a
    # string takes it as its text
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and type_ok("", kind) and not type_ok([], kind)


def _shown(value, quoted: bool = True) -> str:
    """A value as the command line writes it (null, true), cut to one short line."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    text = repr(value) if quoted else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_types(cfg: DictConfig) -> None:
    """Every key of the config has its declared type, and the keys of RANGES_OF their range
    (checked first, in RANGES_OF's order: the keys a user sets most). A key whose value is an
    interpolation is checked where the value is written."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=False)
    keys = [
        (key, kind, value)
        for key, kind, value in _Schema(raw).kinds(raw, defaults=_yaml_defaults())
        if kind is not Any and not (isinstance(value, str) and ("${" in value or value == "???"))
    ]
    kinds = {k: kind for k, kind, _ in keys}
    ranged = [(k, r) for p, r in RANGES_OF.items() for k in kinds if fnmatch.fnmatchcase(k, p)]
    for key, allowed in ranged:
        value, kind = select(cfg, key), kinds[key]
        if value is None and type_ok(None, kind):
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not (number and type_ok(value, kind) and RANGES[allowed](value)):
            null = " (or null)" if type_ok(None, kind) else ""
            what = type_name(kind).replace(" or null", "")
            raise ConfigError(f"{key}={_shown(value)} must be {what} {allowed}{null}.")
    ranged = {k for k, _ in ranged}
    for key, kind, value in keys:
        if key not in ranged and not _fits(value, kind):
            raise ConfigError(f"{key}={_shown(value)} must be {type_name(kind)}.")


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
    try:  # exists() raises for a name longer than the filesystem takes
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{key}={value}: that is a file, not a folder.")
        ancestor = path
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise NotADirectoryError(f"{ancestor} is a file")
        tempfile.TemporaryDirectory(dir=ancestor, prefix=".recipes-probe-").cleanup()
    except OSError as exc:
        raise ConfigError(
            f"{key}={_shown(value, quoted=False)}: cannot write there ({exc.strerror or exc})."
        ) from None


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
        # it names the run's folder (at most 255 bytes on every common filesystem) and is written
        # into one-line records (logs, the step table's header)
        if not name.isprintable():
            raise ConfigError(f"{key}={_shown(name)} must be one line of printable characters.")
        if len(name.encode()) > 255:
            raise ConfigError(
                f"{key}={_shown(name)} is {len(name.encode())} bytes long: it names the run's folder, "
                "and a folder name takes at most 255."
            )
    for key in ("recipes.output_dir", "recipes.cache_dir"):
        _writable_folder(key, select(cfg, key))


def check_files(cfg: DictConfig) -> None:
    """data.train_files and data.val_files each name a file or a non-empty list of them (what is
    in them: check_data)."""
    for key in ("data.train_files", "data.val_files"):
        files = select(cfg, key)
        files = [files] if isinstance(files, str) else list(files or [])
        if not files or not all(isinstance(f, str) and f.strip() for f in files):
            raise ConfigError(
                f"{key}={_shown(select(cfg, key))} must name a parquet file, or a non-empty list of them."
            )


def check_eval_protocol(cfg: DictConfig) -> None:
    """recipes.eval_protocol names a protocol of recipes/protocols.py, or is null: eval.iterate reads it
    from the run's config.yaml after training, too late to hear of a misspelling."""
    from recipes.protocols import PROTOCOLS

    name = select(cfg, "recipes.eval_protocol")
    if name is not None and name not in PROTOCOLS:
        raise ConfigError(
            f"recipes.eval_protocol={_shown(name)} is not an evaluation protocol: choose one of "
            f"{', '.join(PROTOCOLS)} (recipes/protocols.py), or null."
        )


def validate(cfg: DictConfig) -> None:
    """Our checks, in the order a user would want to hear about them. Raises ConfigError."""
    check_paths(cfg)
    _check_added_keys(cfg)
    check_types(cfg)
    check_files(cfg)
    check_eval_protocol(cfg)
    for group, key, choices in (
        ("model", "recipes.model", "configs/model/"),
        ("data", "recipes.data", "configs/data/"),
    ):
        if select(cfg, key) in (None, "hf_model", "legacy_data"):
            raise ConfigError(
                f"{group}: choose one (`{group}=NAME`, NAME a file in {choices}) or an experiment preset."
            )
    _check_methods(cfg)
    from recipes import checkpoints, reward_settings

    checkpoints.check(cfg)

    reward_settings.settings(cfg)  # the reward's settings (types, ranges, the overlong buffer)

    n = int(select(cfg, "actor_rollout_ref.rollout.n"))
    if n < 2:
        raise ConfigError(
            f"actor_rollout_ref.rollout.n={n}: group-relative advantages need at least 2 responses per question."
        )
    # every baseline (configs/method/) is group-relative: it compares a question's sampled responses
    critic = "critic.enable=true" if select(cfg, "critic.enable") else None
    if select(cfg, "algorithm.adv_estimator") == "gae":  # its advantages come from a critic's values
        critic = "algorithm.adv_estimator=gae"
    if critic:
        raise ConfigError(
            f"{critic} trains a critic (a value model), which these recipes do not set up: use a "
            "group-relative estimator such as grpo, as every baseline in configs/method/ does."
        )
    rollout = "actor_rollout_ref.rollout"
    for key, greedy in (("temperature", 0), ("top_k", 1)):
        if select(cfg, f"{rollout}.{key}") == greedy:
            raise ConfigError(
                f"{rollout}.{key}={greedy} decodes greedily: the {n} responses to a prompt are the same text, "
                f"so their group-relative advantages are 0 and teach nothing (greedy validation is "
                f"{rollout}.val_kwargs.{key})."
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
    platforms.of(cfg).check(cfg)  # vLLM's CPU build and the training dtype on a CPU
    determinism.check(cfg)


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
    from hydra.errors import InstantiationException

    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except (AssertionError, ValueError, TypeError, InstantiationException) as exc:  # a dataclass it builds
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


def check_config(cfg: DictConfig) -> None:
    """All checks that need no files: ours, then verl's (what runs before Ray starts)."""
    validate(cfg)
    verl_checks(cfg)
