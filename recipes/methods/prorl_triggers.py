"""When ProRL resets its reference (recipes/methods/prorl.py, level 1 of its docstring): the
triggers of `ProRLSettings` step by step (`ResetController`, driver side, pure Python), and the
sampling noise of a validation that the validation triggers must exceed (`noise_bound`,
`validation_samples`). docs/methods.md#prorl explains the triggers: when each fires, `min_gap`,
phases, when a validation trigger takes effect, and resuming.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

from recipes.files import atomic_write_text

STATE_FILE = "prorl_state.json"


class ProRLError(RuntimeError):
    """A reference that cannot be reset or restored, or a validation the triggers cannot read."""


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
    """When to reset (the triggers: docs/methods.md#prorl). `after_step` / `after_validation` return
    the trigger that fires, if any; the caller resets and then calls `record_reset`."""

    def __init__(self, settings: Any, state: ControllerState | None = None):
        """`settings`: recipes/methods/prorl.py's ProRLSettings (not imported: that module imports this one)."""
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
