"""ProRL (NVIDIA 2025, Nemotron-Research-Reasoning-Qwen-1.5B, sec. 3.3.1; docs/methods.md#prorl):
a k3 KL penalty to a reference policy that is hard-reset to the current policy, together with the
optimizer state, on a schedule or when training degrades. verl has no such reset; this module adds
it at three levels.

1. `ResetController` (driver, pure Python): after each step and each validation, whether a trigger
   of `ProRLSettings` (interval, kl_spike, val_decline, val_plateau) fires. The validation triggers
   count a change only when it exceeds the sampling noise of the validation (`noise_bound`,
   `val_confidence`), so that a model that is flat does not reset on noise.
2. `ProRLWorker` (every actor worker): verl's `ActorRolloutRefWorker` plus methods that copy each
   rank's shard of the actor into the reference in place, clear the optimizer state, and save and
   load the reference's shards.
3. `ProRLHooks` (the trainer, recipes/extensions/trainer.py): applies the resets, logs prorl/*
   (docs/metrics.md), and keeps the controller state (global_step_N/prorl_state.json) and the
   reference (global_step_N/prorl_reference/rank_R.pt) with each checkpoint, so a resumed run
   continues with the same reference and any pending reset.

docs/methods.md#prorl is where the triggers are explained: when each fires, `min_gap`, phases, when a
validation trigger takes effect, and resuming.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from statistics import NormalDist

import ray
import torch
from omegaconf import OmegaConf
from verl.single_controller.base.decorator import Dispatch, register
from verl.trainer.ppo.utils import Role
from verl.utils.debug import marked_timer

from recipes.checkpoints import step_folder
from recipes.files import atomic_write, atomic_write_text
from recipes.methods.base import Method, TrainerHooks
from recipes.settings import ConfigError, setting

STATE_FILE = "prorl_state.json"
SNAPSHOT_DIR = "prorl_reference"


class ProRLError(RuntimeError):
    """A reference that cannot be reset or restored."""


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


def check(cfg, settings: ProRLSettings) -> None:
    """The reset copies the actor into the reference held by the same FSDP workers."""

    def get(key):
        return OmegaConf.select(cfg, key)

    why = "ProRL resets the reference of the KL loss, held by the actor's workers"
    if not get("actor_rollout_ref.actor.use_kl_loss"):
        raise ConfigError(
            f"actor_rollout_ref.actor.use_kl_loss must be true: {why} (list prorl after the baseline: "
            "method=[dapo,prorl])."
        )
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


# ------------------------------------------------------------------- validation noise
METRIC = re.compile(r"val-(?:core|aux)/(?P<source>.+)/(?P<var>[^/]+)/mean@(?P<n>\d+)")
"""verl's name of a validation mean: val-core/<data source>/<variable>/mean@<samples per question>."""


def z_score(confidence: float, comparisons: int) -> float:
    """The one-sided normal quantile at 1 - (1 - confidence) / comparisons (Bonferroni)."""
    return NormalDist().inv_cdf(1 - (1 - confidence) / max(comparisons, 1))


def noise_bound(a: float, b: float, samples: int, confidence: float, comparisons: int = 1) -> float:
    """How far apart two validation values of the same model may fall by sampling alone: z times
    the standard error of their difference, sqrt(2 p (1 - p) / samples) with p their mean (the
    pooled two-proportion test; each value a mean of `samples` scores in [0, 1], whose variance
    is at most p (1 - p) / samples, so the bound holds also when questions differ in difficulty).
    `comparisons`: how many values the larger one was the best of (Bonferroni)."""
    p = min(max((a + b) / 2, 0.0), 1.0)
    return z_score(confidence, comparisons) * math.sqrt(2 * p * (1 - p) / samples)


@dataclass
class ControllerState:
    resets: int = 0
    last_reset_step: int = 0  # the run start counts as a reset of the interval
    kl_streak: int = 0
    best_val: float | None = None
    since_best: int = 0
    pending: str | None = None  # a validation trigger waiting for the next step
    suppressed: int = 0
    history: list = field(default_factory=list)  # [{step, trigger, kl}]
    phase_first: float | None = None  # the phase's first validation value
    phase_vals: int = 0  # validations in this phase
    improved: bool = False  # a best significantly above phase_first was seen in this phase
    last_check: str | None = None  # the last validation decision, in words (printed by the hooks)


class ResetController:
    """When to reset (module doc, 1.; the triggers: docs/methods.md#prorl). `after_step` / `after_validation` return the trigger that
    fires, if any; the caller resets and then calls `record_reset`."""

    def __init__(self, settings: ProRLSettings, state: ControllerState | None = None):
        self.s = settings
        self.state = state or ControllerState()
        self.last_kl: float | None = None

    def _allowed(self, step: int, trigger: str | None) -> str | None:
        if trigger is None:
            return None
        if step - self.state.last_reset_step < self.s.min_gap and self.state.resets > 0:
            self.state.suppressed += 1
            return None
        return trigger

    def take_pending(self, step: int) -> str | None:
        """A validation trigger from the last validation, applied at the start of `step`."""
        trigger, self.state.pending = self.state.pending, None
        return self._allowed(step - 1, trigger)

    def after_step(self, step: int, metrics: Mapping[str, float]) -> str | None:
        s, st = self.s, self.state
        kl = metrics.get(s.kl_metric)
        if kl is not None and math.isfinite(float(kl)):
            self.last_kl = float(kl)
            st.kl_streak = st.kl_streak + 1 if s.kl_threshold is not None and kl > s.kl_threshold else 0
        if s.reset_every and step - st.last_reset_step >= s.reset_every:
            return self._allowed(step, "interval")
        if s.kl_threshold is not None and st.kl_streak >= s.kl_patience:
            return self._allowed(step, "kl_spike")
        return None

    def after_validation(
        self, step: int, val_metrics: Mapping[str, float], samples: int | None = None
    ) -> str | None:
        """Updates the phase's best value and plateau count; a trigger is kept as `pending` (and
        returned). `samples`: the graded responses behind the value (`val_samples` wins over it),
        needed when `val_confidence` is set.

        Why a bound: one validation is a sample. With 500 questions at 80%, two validations of the
        same model differ by 2.5 points (one standard error of the difference), and the best of
        m of them sits above the model's accuracy by more the larger m is, so a raw 'below the best'
        or 'no new best' fires on noise (a flat model: ~15 resets in 2,000 steps, tests/test_prorl.py).
        With `val_confidence` c, a decline counts when the drop exceeds `noise_bound` with z at
        1 - (1 - c) / m, m the validations the best was the best of; the plateau counts only once
        the phase has improved significantly on its first validation (the same bound), so a model
        that never moved is not on a plateau of improvements."""
        s, st = self.s, self.state
        if not s.watches_validation:
            return None
        if s.val_metric not in val_metrics:
            raise ProRLError(
                f"recipes.prorl.val_metric={s.val_metric} is not among this run's validation metrics: "
                f"{sorted(val_metrics)}."
            )
        value = float(val_metrics[s.val_metric])
        n = s.val_samples or samples
        if s.val_confidence is not None:
            if not n:
                raise ProRLError(
                    "recipes.prorl.val_confidence needs the number of graded responses behind "
                    f"{s.val_metric}: set recipes.prorl.val_samples (questions x samples per question)."
                )
            if not 0.0 <= value <= 1.0:
                raise ProRLError(
                    f"recipes.prorl.val_metric={s.val_metric} is {value}, outside [0, 1]: the noise bound "
                    "is for means of scores in [0, 1] such as acc (recipes.prorl.val_confidence=null "
                    "compares raw values)."
                )

        def bound(a: float, b: float, m: int) -> float:
            return 0.0 if s.val_confidence is None else noise_bound(a, b, n, s.val_confidence, m)

        trigger = None
        st.phase_vals += 1
        earlier = st.phase_vals - 1  # the validations of this phase before this one
        if st.best_val is None:
            st.best_val = st.phase_first = value
            st.since_best, st.improved = 0, False
            st.last_check = f"{value:.4f}: the phase's first validation"
        elif value > st.best_val:
            st.best_val, st.since_best = value, 0
            if not st.improved:  # the best of `earlier` values against the phase's first
                gap, limit = value - st.phase_first, bound(value, st.phase_first, earlier)
                st.improved = gap > limit
                st.last_check = (
                    f"{value:.4f}: a new best, {gap:+.4f} on the phase's first (bound {limit:.4f})"
                )
            else:
                st.last_check = f"{value:.4f}: a new best"
        else:
            st.since_best += 1
            drop, limit = st.best_val - value, bound(st.best_val, value, earlier)
            st.last_check = (
                f"{value:.4f}: {drop:.4f} below the best {st.best_val:.4f} of {earlier} validation(s) "
                f"(bound {limit:.4f}), {st.since_best} without a new best"
            )
            if s.val_decline is not None and drop > s.val_decline and drop > limit:
                trigger = "val_decline"
            elif (
                s.val_plateau and st.since_best >= s.val_plateau and (s.val_confidence is None or st.improved)
            ):
                trigger = "val_plateau"
        st.pending = trigger
        return trigger

    def record_reset(self, step: int, trigger: str) -> None:
        st = self.state
        st.history.append({"step": step, "trigger": trigger, "kl": self.last_kl})
        st.resets += 1
        st.last_reset_step = step
        st.kl_streak = 0
        st.best_val, st.since_best = None, 0
        st.phase_first, st.phase_vals, st.improved = None, 0, False

    def metrics(self, step: int, trigger: str | None) -> dict[str, float]:
        st = self.state
        out = {
            "prorl/resets": float(st.resets),
            "prorl/reset": float(trigger is not None),
            "prorl/steps_since_reset": float(step - st.last_reset_step),
            "prorl/kl_streak": float(st.kl_streak),
            "prorl/suppressed": float(st.suppressed),
        }
        if trigger is not None:
            out[f"prorl/reset_trigger/{trigger}"] = 1.0
            if st.history and st.history[-1]["kl"] is not None:
                out["prorl/reset_kl"] = float(st.history[-1]["kl"])
        return out

    # ----------------------------------------------------------------------- checkpoints
    def save(self, folder: str) -> None:
        atomic_write_text(
            os.path.join(folder, STATE_FILE), json.dumps({**asdict(self.state), "last_kl": self.last_kl})
        )

    def load(self, folder: str) -> bool:
        path = os.path.join(folder, STATE_FILE)
        if not os.path.exists(path):
            return False
        with open(path) as f:
            raw = json.load(f)
        self.last_kl = raw.pop("last_kl", None)
        self.state = ControllerState(**raw)
        return True


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
    """`ProRLWorker`, made on first use: only processes that build actor workers import verl's
    workers for it (1 s of every `import recipes.methods.prorl` on 2 cores). Ray finds it by that name."""
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
def validation_samples(dataset, metric: str) -> int:
    """The graded responses behind one value of `metric` (verl's
    val-core/<data source>/<variable>/mean@N): the validation rows of that data source x N."""
    name = METRIC.fullmatch(metric)
    frame = getattr(dataset, "dataframe", None)
    columns = getattr(frame, "column_names", None) or ()
    if name is None or "data_source" not in columns:
        raise ProRLError(
            f"cannot count the samples behind recipes.prorl.val_metric={metric} in this run's validation "
            "set: set recipes.prorl.val_samples (questions x samples per question)."
        )
    questions = sum(1 for source in frame["data_source"] if source == name["source"])
    if questions == 0:
        raise ProRLError(
            f"recipes.prorl.val_metric={metric}: the validation set has no rows of data source "
            f"{name['source']!r}."
        )
    return questions * int(name["n"])


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
    f"ProRL ({PAPER}): KL to a reference that is reset, with the optimizer, on a schedule or when training degrades",
    settings=ProRLSettings,
    check=check,
    hooks=lambda cfg, settings: ProRLHooks(settings),
)
