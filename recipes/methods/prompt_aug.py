"""Prompt augmentation as a method of this project (Lu, Huang, Balestriero 2026, arXiv 2602.03190;
docs/methods.md#prompt-augmentation): its settings, checks and trainer hooks. The templates and the
seeded draw are the `prompt_aug` package; `PromptAugPrompts` picks each rollout's template, which the
agent loop (recipes/extensions/agent_loop.py) puts around the question, and the reward (rewards/training.py) adds
the template's format score.

Per-template metrics, every training step, for each template used in it:
  template/<name>/samples          number of responses shown that template
  template/<name>/acc              their mean accuracy
  template/<name>/format_score     their mean format score (how well the format is followed)
  template/<name>/response_length  their mean response length in tokens
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from prompt_aug import PAPER
from prompt_aug.sampling import TemplateSampler, make_sampler
from prompt_aug.templates import TemplateError
from recipes.methods.base import EPOCH_KEY, Method, Prompt, Samples, TrainerHooks
from recipes.settings import ConfigError, setting


@dataclass(frozen=True)
class PromptAugSettings:
    sampling: Literal["per_prompt", "per_rollout"] = setting(
        "per_prompt",
        None,
        "per_prompt: all rollout.n responses of a prompt share one template, so each GRPO group is "
        "single-template (the authors' code); per_rollout: each response draws its own (ours)",
        PAPER,
    )
    templates: str | list = setting(
        "all",
        None,
        "'all' (the paper's 13), or a list of template and/or family names (deepseek, free-form, "
        "reflection, explicit-cot); `python -m prompt_aug.templates list`",
        PAPER + ", table 1",
    )
    weights: dict | None = setting(
        None, None, "null: uniform, as the paper; or {template: weight}, unlisted selected templates weigh 1"
    )
    seed: int = setting(
        0,
        ">= 0",
        "the draw is a pure function of (seed, epoch, row, rollout), so a resumed run repeats it "
        "(the YAML sets ${data.seed})",
        yaml="${data.seed}",
    )
    val_template: str = setting(
        "qwen-math",
        None,
        "the one template of validation prompts, scored on accuracy only (the paper evaluated with qwen-math)",
        PAPER,
    )


def sampler(settings: PromptAugSettings) -> TemplateSampler:
    """The template sampler of these settings; a template that does not exist is a ConfigError."""
    try:
        return make_sampler(**asdict(settings))
    except TemplateError as exc:
        raise ConfigError(f"recipes.prompt_aug.{exc}") from None


def choose_template(sampler: TemplateSampler, row: dict[str, Any], training: bool) -> str:
    """The template of one session of a dataset row as the agent loop receives it (the row's
    fields plus `session_id`, and `recipes_epoch` on training rows)."""
    if not training:
        return sampler.val_template
    for key in ("index", "session_id"):
        if key not in row:
            raise KeyError(
                f"prompt augmentation needs `{key}` in each rollout's fields (verl's V1 trainer sets it)"
            )
    return sampler.choose(int(row[EPOCH_KEY]), int(row["index"]), int(row["session_id"]))


class PromptAugPrompts:
    """The agent loop's prompt hook: training rows get the seeded draw's template (named in the
    response's extra_fields, where the reward and the trainer read it); validation rows the fixed
    `val_template` and no name (validation scores accuracy only)."""

    def __init__(self, settings: PromptAugSettings):
        self.sampler = sampler(settings)

    def __call__(self, prompt: Prompt, row: dict, training: bool, n_rollouts: int) -> None:
        prompt.template = choose_template(self.sampler, row, training)
        if training:
            prompt.extra["template"] = prompt.template


def template_metrics(templates: list[str | None], infos: list[dict], lengths: list[int]) -> dict[str, float]:
    """Per-template step metrics (module doc); responses without a template are skipped."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(templates):
        if name:
            groups[name].append(i)
    out: dict[str, float] = {}
    for name, idx in sorted(groups.items()):
        graded = [infos[i] for i in idx if "acc" in infos[i]]
        out[f"template/{name}/samples"] = float(len(idx))
        if graded:
            out[f"template/{name}/acc"] = float(np.mean([g["acc"] for g in graded]))
            out[f"template/{name}/format_score"] = float(
                np.mean([g.get("format_score", 0.0) for g in graded])
            )
        out[f"template/{name}/response_length"] = float(np.mean([lengths[i] for i in idx]))
    return out


class PromptAugHooks(TrainerHooks):
    def before_advantage(self, trainer, batch, samples: Samples, metrics: dict) -> None:
        templates = [samples.extra[i].get("template") for i in samples.keep]
        metrics.update(template_metrics(templates, samples.infos, samples.lengths))

    def dump_columns(self, trainer, extra: list[dict]) -> dict[str, list]:
        return {"template": [e.get("template") for e in extra]}


METHOD = Method(
    "prompt_aug",
    settings=PromptAugSettings,
    check=lambda cfg, settings: sampler(settings),
    hooks=lambda cfg, settings: PromptAugHooks(),
    prompts=lambda cfg, settings: PromptAugPrompts(settings),
)
