"""A run's folder: its default name, and the check that a launch into a folder that already holds a
run continues that run rather than another.

The name. A preset names its own run (`trainer.experiment_name` in configs/experiment/). A run
without one is named from what defines it, `<model>-<data>-<methods>-seed<data.seed>`, e.g.
`qwen2_5_math_1_5b-math_l3to5-dapo+prompt_aug-seed42`: two different commands without
`recipes.output_dir` get two folders under outputs/<project>/.

The check. verl resumes from any checkpoint it finds in `trainer.default_local_dir`, whatever the
command (`trainer.resume_mode=auto`), and our launcher says `done:` when that checkpoint is already
at the step count. So a second command that lands in the folder of a first run would either train
nothing or continue the first run's weights with its own settings, silently. Before Ray starts,
`check_same_run` compares the config this launch would save as <output_dir>/config.yaml with the
one the folder's run saved; a launch may go on when they differ only in what does not change what
is trained (`RESUMABLE`): the step count, logging, checkpoint and validation frequencies, paths.
Any other difference stops the launch in one line naming the first differing keys.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from recipes.settings import ConfigError

# Keys (fnmatch patterns) a launch may change and still continue the run in its folder.
RESUMABLE = (
    # the step count
    "trainer.total_training_steps",
    "trainer.total_epochs",
    # logging
    "trainer.logger",
    "trainer.log_val_generations",
    "recipes.verbose",
    "recipes.step_table",
    # how often the trainer looks for finished rollouts: when a step ends, not what it computes
    "recipes.rollout_poll_s",
    # frequencies: checkpoints, validation, what checkpoints keep
    "trainer.save_freq",
    "trainer.test_freq",
    "trainer.val_before_train",
    "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep",
    "actor_rollout_ref.actor.checkpoint.save_contents",
    "recipes.checkpoints.*",
    # paths and how to resume
    "recipes.output_dir",
    "recipes.cache_dir",
    "trainer.default_local_dir",
    "trainer.rollout_data_dir",
    "trainer.validation_data_dir",
    "trainer.resume_mode",
    "trainer.resume_from_path",
    "recipes.force_resume",
    # what a Slurm job asks for (recipes.submit), not what the run computes; absent from the
    # config.yaml of runs started before it existed
    "recipes.slurm.*",
)
SHOWN = 3  # differing keys named in the message
CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def run_name(cfg: DictConfig) -> str:
    """`<model>-<data>-<methods>-seed<data.seed>`: this project's model and data choices (else the
    model path's last part and the train file's folder and name), the methods in declaration order
    (baselines first: recipes/methods/manifest.py), so the order `method=[...]` lists them in does not
    make another run."""
    from recipes.methods.manifest import ordered

    def ours(group: str, key: str) -> str | None:
        choice = OmegaConf.select(cfg, key)
        return choice if choice and (CONFIG_DIR / group / f"{choice}.yaml").is_file() else None

    model = ours("model", "recipes.model") or Path(str(_select(cfg, "actor_rollout_ref.model.path"))).name
    files = _select(cfg, "data.train_files")
    first = Path(str(files[0] if OmegaConf.is_list(files) and len(files) else files))
    data = ours("data", "recipes.data") or f"{first.parent.name}_{first.stem}".strip("_")
    methods = "+".join(ordered(OmegaConf.select(cfg, "recipes.methods") or {}))
    name = f"{model or 'model'}-{data or 'data'}-{methods}-seed{OmegaConf.select(cfg, 'data.seed')}"
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)


def _select(cfg: DictConfig, key: str):
    value = OmegaConf.select(cfg, key, throw_on_missing=False)
    return "" if value is None else value


def resolved_yaml(cfg: DictConfig) -> str:
    """The config as the run sees it, interpolations resolved (what <output_dir>/config.yaml holds)."""
    try:
        return OmegaConf.to_yaml(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - an interpolation only a worker can resolve: keep it as written
        return OmegaConf.to_yaml(cfg)


def _flat(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out |= _flat(value, f"{prefix}{key}.")
        return out
    return {prefix[:-1]: tree}


def _relative(flat: dict) -> dict:
    """Paths under the run's cache or output folder written relative to it: a run whose cache or
    folder moved (another machine, a renamed folder) is still the same run."""
    roots = [(str(flat.get(k) or ""), f"<{k}>") for k in ("recipes.cache_dir", "recipes.output_dir")]
    roots = sorted((r for r in roots if r[0]), key=lambda r: -len(r[0]))  # the longer first
    out = {}
    for key, value in flat.items():
        if isinstance(value, str):
            for root, name in roots:
                value = value.replace(root, name)
        out[key] = value
    return out


def differences(saved: dict, now: dict) -> list[tuple[str, object, object]]:
    """(key, saved value, value now) for each key that differs and may not (RESUMABLE), in the
    order of the saved config (ours, `recipes.*`, first), paths under the cache and output folders compared relative to
    them. A key only one side has differs (`None` on the other)."""
    old, new = _flat(saved), _flat(now)
    rel_old, rel_new = _relative(old), _relative(new)
    keys = list(old) + [k for k in new if k not in old]
    keys.sort(key=lambda k: not k.startswith("recipes."))  # our choices (methods, model, data) first
    return [
        (k, old.get(k), new.get(k))
        for k in keys
        if rel_old.get(k) != rel_new.get(k) and not any(fnmatch.fnmatchcase(k, p) for p in RESUMABLE)
    ]


def check_same_run(cfg: DictConfig) -> None:
    """Raise ConfigError when <output_dir> holds a checkpointed run whose config.yaml differs from
    this launch's in a key outside RESUMABLE (unless recipes.force_resume)."""
    out = Path(str(OmegaConf.select(cfg, "recipes.output_dir"))).expanduser()
    tracker = (
        Path(str(OmegaConf.select(cfg, "trainer.default_local_dir"))) / "latest_checkpointed_iteration.txt"
    )
    saved_path = out / "config.yaml"
    if OmegaConf.select(cfg, "recipes.force_resume") or not tracker.is_file() or not saved_path.is_file():
        return  # nothing there to continue (a run that never checkpointed leaves nothing to resume)
    try:
        saved = yaml.safe_load(saved_path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(
            f"{saved_path} cannot be read ({exc}); move it away or set recipes.force_resume=true."
        ) from None
    found = differences(saved or {}, yaml.safe_load(resolved_yaml(cfg)))
    if not found:
        return
    shown = ", ".join(f"{k} ({a!r} there, {b!r} now)" for k, a, b in found[:SHOWN])
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    step = tracker.read_text().strip()
    raise ConfigError(
        f"{out} holds another run (checkpointed at step {step}) whose config differs in {shown}{more}: "
        "start a new run with trainer.experiment_name=NAME or recipes.output_dir=DIR, "
        "or continue that run with these settings with recipes.force_resume=true."
    )
