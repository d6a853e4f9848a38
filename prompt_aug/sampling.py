"""Which template each rollout is shown: a pure function of (seed, epoch, row, rollout).

The authors drew one template per prompt, uniformly and unseeded (all n rollouts of a prompt
share it, so every GRPO group is single-template). Here the draw is

    u = numpy.random.default_rng([seed, epoch, row, r]).random(),  r = rollout if per_rollout else 0

mapped through the cumulative template weights, so a resumed run, or a rerun with the same seed,
shows every (epoch, row, rollout) the same template, whatever the batch size or the order in
which rollouts are generated. `epoch` is the dataloader pass the row was drawn in (counted by
recipes/extensions/trainer.py and stored in checkpoints), `row` the row's `extra_info.index`, `rollout` the
session 0..n-1 within its group.

The settings that build a sampler (`recipes.prompt_aug` in the Hydra config) are described in
recipes/methods/prompt_aug.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from prompt_aug.templates import TemplateError, get, select

SAMPLING_MODES = ("per_prompt", "per_rollout")


@dataclass(frozen=True)
class TemplateSampler:
    names: tuple[str, ...]
    probs: tuple[float, ...]
    per_rollout: bool
    seed: int
    val_template: str

    def choose(self, epoch: int, row: int, rollout: int) -> str:
        """The template of rollout `rollout` of dataset row `row` in pass `epoch`."""
        key = [self.seed, epoch, row, rollout if self.per_rollout else 0]
        if min(key) < 0:
            raise ValueError(f"seed, epoch, row and rollout must be >= 0, got {key}")
        u = np.random.default_rng(key).random()
        idx = int(np.searchsorted(np.cumsum(self.probs), u, side="right"))
        return self.names[min(idx, len(self.names) - 1)]  # guard the u ~ 1.0 rounding edge


def make_sampler(
    sampling: str = "per_prompt",
    templates: str | Sequence[str] = "all",
    weights: Mapping[str, float] | None = None,
    seed: int = 0,
    val_template: str = "qwen-math",
) -> TemplateSampler:
    """A sampler over the selected templates; a name that is not a template, or weights that
    cannot be drawn from, raise TemplateError."""
    if sampling not in SAMPLING_MODES:
        raise TemplateError(f"sampling={sampling!r}: expected one of {SAMPLING_MODES}")
    try:
        names = select(templates if isinstance(templates, str) else list(templates))
    except TemplateError as exc:
        raise TemplateError(f"templates: {exc}") from None
    try:
        val_template = get(val_template).name
    except TemplateError as exc:
        raise TemplateError(f"val_template: {exc}") from None
    weights = dict(weights or {})
    stray = sorted(set(weights) - set(names))
    if stray:
        raise TemplateError(f"weights names {stray}, which are not among the selected {names}")
    w = []
    for n in names:
        value = weights.get(n, 1.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise TemplateError(f"weights.{n}={value!r}: expected a number >= 0")
        w.append(float(value))
    if sum(w) <= 0:
        raise TemplateError("weights: every selected template has weight 0")
    if seed < 0:
        raise TemplateError(f"seed={seed!r}: expected an int >= 0")
    total = sum(w)
    return TemplateSampler(
        names=tuple(names),
        probs=tuple(x / total for x in w),
        per_rollout=sampling == "per_rollout",
        seed=seed,
        val_template=val_template,
    )
