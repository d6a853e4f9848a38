"""Which template each rollout is shown: a pure function of (seed, epoch, row, rollout).

The authors drew one template per prompt, uniformly and unseeded (all n rollouts of a prompt
share it, so every GRPO group is single-template). Here the draw is

    u = numpy.random.default_rng([seed, epoch, row, r]).random(),  r = rollout if per_rollout else 0

mapped through the cumulative template weights, so a resumed run, or a rerun with the same seed,
shows every (epoch, row, rollout) the same template, whatever the batch size or the order in
which rollouts are generated. `epoch` is the dataloader pass the row was drawn in (counted by
recipes/trainer.py and stored in checkpoints), `row` the row's `extra_info.index`, `rollout` the
session 0..n-1 within its group.

Settings (`recipes.prompt_aug` in the Hydra config; configs/method/prompt_aug.yaml):
  sampling      per_prompt (default, the authors' choice) | per_rollout (each rollout its own)
  templates     "all", or a list of template and family names
  weights       null (uniform) or {template: weight}; unlisted selected templates weigh 1.0
  seed          the draw's seed (default: data.seed)
  val_template  the template validation prompts use (the paper evaluated with qwen-math)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from prompt_aug.templates import TemplateError, get, select

SAMPLING_MODES = ("per_prompt", "per_rollout")
SETTINGS = ("sampling", "templates", "weights", "seed", "val_template")


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


def make_sampler(settings: Mapping) -> TemplateSampler:
    """A sampler from the `recipes.prompt_aug` settings; a bad setting raises TemplateError."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise TemplateError(f"recipes.prompt_aug: unknown settings {unknown}; known: {list(SETTINGS)}")
    sampling = settings.get("sampling", "per_prompt")
    if sampling not in SAMPLING_MODES:
        raise TemplateError(f"recipes.prompt_aug.sampling={sampling!r}: expected one of {SAMPLING_MODES}")
    spec = settings.get("templates", "all")
    names = select(spec if isinstance(spec, str) else list(spec))
    weights = dict(settings.get("weights") or {})
    stray = sorted(set(weights) - set(names))
    if stray:
        raise TemplateError(
            f"recipes.prompt_aug.weights names {stray}, which are not among the selected {names}"
        )
    w = []
    for n in names:
        value = weights.get(n, 1.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise TemplateError(f"recipes.prompt_aug.weights.{n}={value!r}: expected a number >= 0")
        w.append(float(value))
    if sum(w) <= 0:
        raise TemplateError("recipes.prompt_aug.weights: every selected template has weight 0")
    seed = settings.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TemplateError(f"recipes.prompt_aug.seed={seed!r}: expected an int >= 0")
    val_template = get(settings.get("val_template", "qwen-math")).name
    total = sum(w)
    return TemplateSampler(
        names=tuple(names),
        probs=tuple(x / total for x in w),
        per_rollout=sampling == "per_rollout",
        seed=seed,
        val_template=val_template,
    )
