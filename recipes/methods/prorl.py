"""ProRL (NVIDIA 2025, Nemotron-Research-Reasoning-Qwen-1.5B, sec. 3.3.1; docs/methods.md#prorl):
a k3 KL penalty to a reference policy that is hard-reset to the current policy, together with the
optimizer state, on a schedule or when training degrades. verl has no such reset; this module adds
it at three levels.

1. `ResetController` (driver, pure Python; recipes/methods/prorl_triggers.py): after each step and
   each validation, whether a trigger of `ProRLSettings` (interval, kl_spike, val_decline,
   val_plateau) fires. The validation triggers count a change only when it exceeds the sampling
   noise of the validation (`noise_bound`, `val_confidence`), so that a model that is flat does not
   reset on noise.
2. `ProRLWorker` (every actor worker): verl's `ActorRolloutRefWorker` plus methods that copy each
   rank's shard of the actor into the reference in place, clear the optimizer state, and save and
   load the reference's shards.
3. `ProRLHooks` (the trainer, recipes/extensions/trainer.py): applies the resets, logs prorl/*
   (docs/metrics.md), and keeps the controller state (global_step_N/prorl_state.json) and the
   reference (global_step_N/prorl_reference/rank_R.pt) with each checkpoint, so a resumed run
   continues with the same reference and any pending reset.

The KL term itself (k3 to the reference, coefficient `kl_coef`) is set by `configure` after
composition, whatever the order of `method=[...]`. docs/methods.md#prorl is where the triggers are
explained: when each fires, `min_gap`, phases, when a validation trigger takes effect, and resuming.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ray
import torch
from omegaconf import OmegaConf
from verl.single_controller.base.decorator import Dispatch, register
from verl.trainer.ppo.utils import Role
from verl.utils.debug import marked_timer

from recipes.checkpoints import step_folder
from recipes.files import atomic_write
from recipes.methods.base import Method, TrainerHooks, decides
from recipes.methods.prorl_triggers import (
    METRIC,
    ProRLError,
    ResetController,
    noise_bound,
    validation_samples,
)
from recipes.settings import ConfigError, setting

SNAPSHOT_DIR = "prorl_reference"
PAPER = "NVIDIA 2025, Nemotron-Research-Reasoning-Qwen-1.5B, sec. 3.3.1"


@dataclass(frozen=True)
class ProRLSettings:
    reset_every: int = setting(
        200,
        ">= 0",
        "reset every K steps since the last reset (0 = off); the report resets at hand-picked points "
        "and names no interval, 200 is ours so that method=[...,prorl] alone resets",
        PAPER,
    )
    reset_optimizer: bool = setting(
        True,
        None,
        "re-initialize the optimizer state at a reset (the learning-rate schedule keeps its position)",
        PAPER,
    )
    kl_threshold: float | None = setting(
        None,
        "> 0",
        "KL spike trigger: the step's KL (kl_metric) above this for kl_patience consecutive steps "
        "(null = off; the report resets 'after observing KL spikes' and gives no threshold)",
        PAPER,
    )
    kl_patience: int = setting(3, ">= 1", "consecutive steps above kl_threshold that fire a reset")
    kl_metric: str = setting("actor/kl_loss", None, "the step metric the KL spike trigger watches")
    val_metric: str | None = setting(
        None,
        None,
        "the validation metric the decline / plateau triggers watch, e.g. val-core/math500/acc/mean@1 "
        "(trainer.test_freq sets how often it is measured)",
        PAPER + " ('when validation metrics significantly degrade or when improvements plateau')",
    )
    val_decline: float | None = setting(
        None,
        ">= 0",
        "reset when val_metric falls more than this below its best, and (val_confidence) more than "
        "its sampling noise allows (null = off)",
        PAPER,
    )
    val_plateau: int = setting(
        0,
        ">= 0",
        "reset after this many validations without a new best, once the phase has improved "
        "significantly on its first validation (val_confidence; 0 = off)",
        PAPER,
    )
    val_confidence: float | None = setting(
        0.999,
        None,
        "one-sided confidence, in [0.5, 1), that a decline or a phase's improvement is not sampling "
        "noise: the gap must exceed z * sqrt(2 p(1-p) / val_samples) with z at 1 - (1 - confidence) / m, "
        "m the validations the best was taken from (docs/methods.md#prorl); about (1 - confidence) "
        "noise resets per validation at most; null = compare raw values",
        PAPER + " ('significantly degrade'); the bound is ours",
    )
    val_samples: int | None = setting(
        None,
        ">= 1",
        "graded responses behind one value of val_metric, for val_confidence; null = counted at the "
        "first validation: the validation rows of val_metric's data source x the N of its mean@N",
    )
    min_gap: int = setting(
        0, ">= 0", "at least this many steps between two resets (a sooner trigger is dropped)"
    )
    kl_coef: float = setting(
        1.0e-4,
        ">= 0",
        "beta, the k3 KL term's coefficient: actor_rollout_ref.actor.kl_loss_coef is set from it, "
        "unless the preset or the command line sets kl_loss_coef more directly (the command line "
        "over a preset), which then sets this; both at one level must agree",
        PAPER,
    )

    def __post_init__(self):
        if (self.val_decline is not None or self.val_plateau) and not self.val_metric:
            raise ValueError(
                "val_decline / val_plateau watch a validation metric: set recipes.prorl.val_metric "
                "(e.g. val-core/<data source>/acc/mean@1)."
            )
        if self.val_confidence is not None and not 0.5 <= self.val_confidence < 1:
            raise ValueError(
                f"val_confidence={self.val_confidence} must be in [0.5, 1) (null compares raw values)."
            )

    @property
    def watches_validation(self) -> bool:
        return self.val_decline is not None or self.val_plateau > 0


KL_KEYS = {
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",  # k3: pi_ref/pi - log(pi_ref/pi) - 1
}
COEF_KEY = "actor_rollout_ref.actor.kl_loss_coef"
COEF_SETTING = "recipes.prorl.kl_coef"


def configure(cfg, settings: ProRLSettings, explicit: Mapping[str, str]) -> dict[str, Any]:
    """The KL term in the loss, k3 with beta = kl_coef, over whatever the baseline set. A KL key the
    preset or the command line sets itself is left as given (`check` refuses the KL loss turned
    off); a kl_loss_coef set more directly than kl_coef (base.py `decides`) sets kl_coef."""
    out: dict[str, Any] = {k: v for k, v in KL_KEYS.items() if k not in explicit}
    rule = decides(explicit, COEF_KEY, [COEF_SETTING])
    if rule == "settings":
        out[COEF_KEY] = settings.kl_coef
        return out
    coef = float(OmegaConf.select(cfg, COEF_KEY))
    if rule == "both" and coef != settings.kl_coef:
        raise ConfigError(
            f"{COEF_KEY}={coef} ({explicit[COEF_KEY]}) contradicts {COEF_SETTING}={settings.kl_coef} "
            f"({explicit[COEF_SETTING]}): set {COEF_SETTING} alone."
        )
    out[COEF_SETTING] = coef
    return out


def check(cfg, settings: ProRLSettings) -> None:
    """The reset copies the actor into the reference held by the same FSDP workers."""

    def get(key):
        return OmegaConf.select(cfg, key)

    why = "ProRL resets the reference of the KL loss, held by the actor's workers"
    if not get("actor_rollout_ref.actor.use_kl_loss"):
        raise ConfigError(f"actor_rollout_ref.actor.use_kl_loss must be true: {why}.")
    lora = get("actor_rollout_ref.model.lora.rank") or get("actor_rollout_ref.model.lora_rank") or 0
    if int(lora) > 0 or get("actor_rollout_ref.model.lora_adapter_path"):
        raise ConfigError(f"actor_rollout_ref.model.lora: {why}; with LoRA the reference is the base model.")
    for role in ("actor", "ref"):
        strategy = get(f"actor_rollout_ref.{role}.strategy")
        if strategy not in ("fsdp", "fsdp2"):
            raise ConfigError(
                f"actor_rollout_ref.{role}.strategy={strategy}: the ProRL reset supports fsdp and fsdp2."
            )
    if not get("actor_rollout_ref.hybrid_engine"):
        raise ConfigError(f"actor_rollout_ref.hybrid_engine must be true: {why}.")
    if settings.watches_validation and int(get("trainer.test_freq") or 0) <= 0:
        raise ConfigError(
            f"trainer.test_freq={get('trainer.test_freq')}: recipes.prorl.val_decline / val_plateau need "
            "validations (trainer.test_freq > 0)."
        )
    if settings.watches_validation:
        name = METRIC.fullmatch(settings.val_metric)
        val_n = int(get("actor_rollout_ref.rollout.val_kwargs.n") or 1)
        if name and int(name["n"]) != val_n:
            raise ConfigError(
                f"recipes.prorl.val_metric={settings.val_metric} with actor_rollout_ref.rollout.val_kwargs.n="
                f"{val_n}: verl names the mean of {val_n} samples per question mean@{val_n}."
            )
        if settings.val_confidence is not None and settings.val_samples is None and not name:
            raise ConfigError(
                f"recipes.prorl.val_metric={settings.val_metric}: val_confidence needs the number of "
                "samples behind it, counted only for verl's val-core/<data source>/<variable>/mean@N "
                "names; set recipes.prorl.val_samples."
            )


# --------------------------------------------------------------------------- worker side
def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of an FSDP2 (DTensor) parameter, or the tensor itself (FSDP1 flat param)."""
    return t.to_local() if hasattr(t, "to_local") else t


def _reshard(module: torch.nn.Module) -> None:
    """FSDP2 swaps a module's parameters for unsharded ones between forward and reshard; make
    sure `parameters()` are the sharded ones (the copy must write where the next unshard reads)."""
    from torch.distributed.fsdp import FSDPModule

    for m in module.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def sharded_params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    _reshard(module)
    return {name: _local(p) for name, p in module.named_parameters()}


@torch.no_grad()
def copy_parameters(source: torch.nn.Module, target: torch.nn.Module) -> int:
    """target's parameters := source's, shard by shard, in place (across devices and dtypes).
    Both must be wrapped the same way (same names and local shapes). Returns the element count."""
    src, dst = sharded_params(source), sharded_params(target)
    if src.keys() != dst.keys():
        missing, extra = sorted(src.keys() - dst.keys())[:3], sorted(dst.keys() - src.keys())[:3]
        raise ProRLError(
            f"the reference module is not wrapped like the actor (actor-only {missing}, reference-only {extra})"
        )
    count = 0
    for name, s in src.items():
        d = dst[name]
        if d.shape != s.shape:
            raise ProRLError(f"{name}: actor shard {tuple(s.shape)} vs reference shard {tuple(d.shape)}")
        d.copy_(s, non_blocking=False)
        count += s.numel()
    return count


def clear_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Re-initialize the optimizer's per-parameter state (AdamW: moments and step count restart
    as in a fresh optimizer). Parameter groups, and so the learning rate the schedule has set,
    are kept; the scheduler holds its own position."""
    optimizer.state.clear()


def save_shards(module: torch.nn.Module, folder: str, rank: int, world: int) -> None:
    shards = {name: t.detach().to("cpu", copy=True) for name, t in sharded_params(module).items()}
    atomic_write(
        os.path.join(folder, f"rank_{rank}.pt"),
        lambda tmp: torch.save({"world_size": world, "shards": shards}, tmp),
    )


@torch.no_grad()
def load_shards(module: torch.nn.Module, folder: str, rank: int, world: int) -> None:
    path = os.path.join(folder, f"rank_{rank}.pt")
    if not os.path.exists(path):
        raise ProRLError(f"{path} is missing: the reference snapshot of this checkpoint is incomplete")
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if blob["world_size"] != world:
        raise ProRLError(
            f"{folder} was saved by {blob['world_size']} ranks and this run has {world}: resume ProRL with the "
            "same number of GPUs (the reference is stored as per-rank shards)."
        )
    params = sharded_params(module)
    if params.keys() != blob["shards"].keys():
        raise ProRLError(f"{path} holds other parameters than the reference module")
    for name, t in params.items():
        t.copy_(blob["shards"][name])


@functools.cache
def worker_class() -> type:
    """`ProRLWorker`, made on first use, so that importing this module does not import verl's
    workers: only a process that builds actor workers needs them. Ray finds it by that name."""
    from verl.workers.engine_workers import ActorRolloutRefWorker

    class ProRLWorker(ActorRolloutRefWorker):
        """verl's actor/rollout/reference worker plus the reference reset (module doc, 2.)."""

        def _engines(self):
            if self.actor is None or self.ref is None:
                raise ProRLError(
                    f"worker role {self.role!r}: ProRL needs the actor and the reference in the same worker "
                    "(role actor_rollout_ref: KL loss on, no LoRA, hybrid engine)"
                )
            return self.actor.engine, self.ref.engine

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def prorl_reset_reference(self, reset_optimizer: bool = True) -> dict:
            t0 = time.perf_counter()
            actor, ref = self._engines()
            n = copy_parameters(actor.module, ref.module)
            if reset_optimizer:
                clear_optimizer_state(actor.optimizer)
            return {"elements": n, "seconds": time.perf_counter() - t0}

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def prorl_save_reference(self, folder: str) -> None:
            save_shards(self._engines()[1].module, folder, self.rank, self.world_size)

        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def prorl_load_reference(self, folder: str) -> None:
            load_shards(self._engines()[1].module, folder, self.rank, self.world_size)

    ProRLWorker.__module__, ProRLWorker.__qualname__ = __name__, "ProRLWorker"
    return ProRLWorker


def __getattr__(name: str):
    if name == "ProRLWorker":
        return worker_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- trainer side
class ProRLHooks(TrainerHooks):
    """The trainer side (module doc, 3.): swaps the actor workers for ProRLWorkers, asks the
    controller after each step and validation, resets through the workers, and keeps the
    controller state and the reference snapshot with each checkpoint."""

    def __init__(self, settings: ProRLSettings):
        self.s = settings
        self.ctl = ResetController(settings)
        self.training = False  # validations before training do not feed the triggers
        self.early: str | None = None  # a validation trigger applied at the start of this step
        self.samples: int | None = settings.val_samples  # behind one value of val_metric

    def setup_workers(self, trainer) -> None:
        if Role.ActorRolloutRef not in trainer.role_worker_mapping:
            raise ProRLError(
                f"ProRL resets a reference held by the actor's workers; this run's roles are "
                f"{sorted(map(str, trainer.role_worker_mapping))} (KL loss off, LoRA, or a separate reference)"
            )
        trainer.role_worker_mapping[Role.ActorRolloutRef] = ray.remote(worker_class())

    def on_train_begin(self, trainer) -> None:
        self.training = True

    def before_step(self, trainer, timing_raw: dict) -> None:
        # a validation trigger of the previous step: reset to that step's weights before rollout
        self.early = self.ctl.take_pending(trainer.global_steps)
        if self.early:
            self._reset(trainer, trainer.global_steps - 1, self.early, timing_raw)

    def after_step(self, trainer, metrics: dict, timing_raw: dict) -> None:
        trigger = self.ctl.after_step(trainer.global_steps, metrics)
        if trigger:
            self._reset(trainer, trainer.global_steps, trigger, timing_raw)
        metrics.update(self.ctl.metrics(trainer.global_steps, trigger or self.early))

    def _reset(self, trainer, step: int, trigger: str, timing_raw: dict) -> None:
        with marked_timer("prorl_reset", timing_raw, color="purple"):
            trainer.actor_rollout_wg.prorl_reset_reference(reset_optimizer=self.s.reset_optimizer)
        kl = self.ctl.last_kl
        self.ctl.record_reset(step, trigger)
        print(
            f"[prorl] reset {self.ctl.state.resets} after step {step}: trigger {trigger}, KL {kl}, "
            f"optimizer {'re-initialized' if self.s.reset_optimizer else 'kept'}, "
            f"{timing_raw['prorl_reset']:.2f} s",
            flush=True,
        )

    def after_validation(self, trainer, val_metrics: dict) -> None:
        if not (self.training and self.s.watches_validation):
            return
        first = self.samples is None and self.s.val_confidence is not None
        if first:
            self.samples = validation_samples(trainer.val_dataset, self.s.val_metric)
        trigger = self.ctl.after_validation(trainer.global_steps, val_metrics, samples=self.samples)
        if first:  # what the bound means for this run, once
            value = float(val_metrics[self.s.val_metric])
            print(
                f"[prorl] {self.s.val_metric} is a mean of {self.samples} graded responses: at {value:.4f} "
                f"a change counts when it exceeds {noise_bound(value, value, self.samples, self.s.val_confidence):.4f} "
                f"against one earlier validation, more against the best of several "
                f"(recipes.prorl.val_confidence={self.s.val_confidence})",
                flush=True,
            )
        print(
            f"[prorl] validation after step {trainer.global_steps}: {self.s.val_metric} "
            f"{self.ctl.state.last_check}"
            + (f"; {trigger} fires before step {trainer.global_steps + 1}" if trigger else ""),
            flush=True,
        )
        folder = step_folder(trainer.config.trainer.default_local_dir, trainer.global_steps)
        if os.path.isdir(folder):  # this step's checkpoint: record the decision for a resume
            self.ctl.save(folder)

    def save(self, trainer, folder: str) -> None:
        self.ctl.save(folder)
        if self.ctl.state.resets:
            with marked_timer("prorl_snapshot", trainer.timing_raw, color="purple"):
                trainer.actor_rollout_wg.prorl_save_reference(folder=os.path.join(folder, SNAPSHOT_DIR))
        # verl rotates only the actor/ folder of old checkpoints (max_actor_ckpt_to_keep)
        root, current = os.path.split(folder)
        for name in os.listdir(root):
            old = os.path.join(root, name, SNAPSHOT_DIR)
            rotated = not os.path.isdir(os.path.join(root, name, "actor"))
            if name.startswith("global_step_") and name != current and rotated and os.path.isdir(old):
                shutil.rmtree(old, ignore_errors=True)

    def load(self, trainer, folder: str) -> None:
        if not self.ctl.load(folder):
            self.ctl.state.last_reset_step = trainer.global_steps
            print(
                f"[prorl] {folder} has no ProRL state: the reference is the initial model, the interval "
                f"counts from step {trainer.global_steps}"
            )
            return
        if self.ctl.state.resets:
            snapshot = os.path.join(folder, SNAPSHOT_DIR)
            if not os.path.isdir(snapshot):
                raise ProRLError(
                    f"{snapshot} is missing: this checkpoint was taken after {self.ctl.state.resets} "
                    "reference reset(s), and without the snapshot the reference cannot be restored"
                )
            trainer.actor_rollout_wg.prorl_load_reference(folder=snapshot)
            print(f"[prorl] reference restored from {snapshot} (reset {self.ctl.state.resets})")


METHOD = Method(
    "prorl",
    settings=ProRLSettings,
    check=check,
    hooks=lambda cfg, settings: ProRLHooks(settings),
    configure=configure,
)
