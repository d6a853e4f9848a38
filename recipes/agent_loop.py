"""verl agent loop `recipes_prompt_variants`, the default of every run (configs/train.yaml): verl's
single-turn loop, plus each rollout's prompt built from its own variant and, with
`recipes.deterministic`, each request's own vLLM seed (recipes/determinism.py).

verl gives every dataset row one `uid` and runs `rollout.n` sessions of the row's agent loop
(`session_id` 0..n-1); GRPO normalizes over the uid. Variants of one question (prompt-augmentation
templates, TA-GRPO rephrasings) therefore live in one row, and this loop picks the variant of each
session and builds the prompt ids that reach generation. verl's default loop re-applies the
tokenizer's chat template to `raw_prompt`, so the template cannot come from the tokenizer.

TA-GRPO (recipes/ta_grpo.py), on with `method=[...,ta_grpo]`: training session k shows
question variant k // G (0: the original, v: `rephrasings[v-1]`), named in
`extra_fields["variant"]`; with `anchor: original` the output carries q0's prompt ids (same
template) in place of the variant's, and no rollout log-probs. Without prompt augmentation the
variant's text replaces the original question inside the dataset's own prompt.

Prompt augmentation (docs/methods.md#prompt-augmentation), on with `method=[...,prompt_aug]`:
  training rows    template = TemplateSampler.choose(epoch, row, session) (prompt_aug/sampling.py),
                   applied to `extra_info.question` through the model's chat template; the name
                   goes to `extra_fields["template"]`, where the reward (format score) and the
                   trainer (per-template metrics, rollout dump) read it.
  validation rows  the fixed `val_template` (qwen-math, as the paper evaluated), and no template
                   name: validation scores accuracy only.
Training rows are told apart by `recipes_epoch`, which recipes/trainer.py adds to every batch it
fetches; validation batches do not pass through that code.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from prompt_aug.sampling import TemplateSampler
from prompt_aug.templates import prompt_ids
from recipes import determinism, prompt_augmentation, registry, ta_grpo
from recipes.settings import ConfigError

AGENT_NAME = "recipes_prompt_variants"
EPOCH_KEY = "recipes_epoch"  # per-row dataloader pass, set by recipes/trainer.py on training batches


def sampler_from_config(config) -> TemplateSampler | None:
    """The template sampler of `recipes.prompt_aug`, or None when prompt augmentation is off."""
    settings = registry.settings(config, "prompt_aug")
    return prompt_augmentation.sampler(settings) if settings is not None else None


def check_variant_loop(cfg, names: list[str]) -> None:
    """Methods `names` build prompts in this agent loop, which needs our trainer's epochs."""
    loop = OmegaConf.select(cfg, "actor_rollout_ref.rollout.agent.default_agent_loop")
    if loop != AGENT_NAME:
        raise ConfigError(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={loop}: method(s) {', '.join(names)} "
            f"build each rollout's prompt in the agent loop {AGENT_NAME!r}."
        )


def choose_template(sampler: TemplateSampler, row: dict[str, Any]) -> tuple[str, bool]:
    """(template name, is a training row) for one session of a dataset row as the agent loop
    receives it (the row's fields plus `session_id`)."""
    if EPOCH_KEY not in row:
        return sampler.val_template, False
    for key in ("index", "session_id"):
        if key not in row:
            raise KeyError(
                f"prompt augmentation needs `{key}` in each rollout's fields (verl's V1 trainer sets it)"
            )
    return sampler.choose(int(row[EPOCH_KEY]), int(row["index"]), int(row["session_id"])), True


def question_of(row: dict[str, Any]) -> str:
    """The raw question (no instruction) of a dataset row: `extra_info.question` (docs/data.md)."""
    extra = row.get("extra_info")
    question = extra.get("question") if isinstance(extra, dict) else None
    if not isinstance(question, str) or not question:
        raise KeyError(
            f"row {row.get('index')!r} of data source {row.get('data_source')!r} has no extra_info.question: "
            "templates need the question without the dataset's instruction (prepare data with "
            "`python -m recipes.data`, see docs/data.md)"
        )
    return question


def request_seed(seed: int, row: dict[str, Any]) -> int:
    """The vLLM seed of one session of a dataset row: (seed, epoch, row, session) for training
    rows, (seed, "val", row, session) for validation rows (recipes/determinism.py)."""
    where = row[EPOCH_KEY] if EPOCH_KEY in row else "val"
    return determinism.request_seed(seed, where, int(row["index"]), int(row["session_id"]))


@register(AGENT_NAME)
class PromptVariantAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn loop with the prompt ids built from this session's template and
    question variant, and (TA-GRPO, anchor=original) stored with the original question's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sampler = sampler_from_config(self.config)
        self.ta = registry.settings(self.config, "ta_grpo")
        self.deterministic = determinism.enabled(self.config)
        self._original: str | None = None  # the row's question (extra_info.question)
        self._question: str | None = None  # the question this prompt shows
        self._template: str | None = None

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> Any:
        if self.deterministic:
            sampling_params = {**sampling_params, "seed": request_seed(self.rollout_config.seed, kwargs)}
        if self.sampler is None and self.ta is None:  # verl's loop, as it is
            return await super().run(sampling_params, **kwargs)
        training = EPOCH_KEY in kwargs
        original = question_of(kwargs)
        extra: dict[str, Any] = {}
        if self.sampler is not None:
            self._template, _ = choose_template(self.sampler, kwargs)
            if training:
                extra["template"] = self._template
        variant = 0
        if self.ta is not None and training:
            variant = self.ta.variant(int(kwargs["session_id"]), self.rollout_config.n)
            extra["variant"] = variant
        self._original = original
        self._question = ta_grpo.variant_question(kwargs, variant, original)
        output = await super().run(sampling_params, **kwargs)
        if training and self.ta is not None and self.ta.anchor == "original":
            if variant:  # eq. 4: every log-prob under q0
                extra["generation_prompt_ids"] = list(output.prompt_ids)  # for the rollout dump
                self._question = original
                output.prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
            output.response_logprobs = None  # the rollout's are under q_v: never compare them
        output.extra_fields.update(extra)
        return output

    async def ct_build_initial_tokens(self, messages: list[dict], **multimodal: Any) -> list[int]:
        if self._template is None:  # the dataset's prompt, with this variant's question in it
            if self._question != self._original:
                messages = ta_grpo.swap_question(messages, self._original, self._question)
            return await super().ct_build_initial_tokens(messages, **multimodal)
        template, question = self._template, self._question
        ids = await self.loop.run_in_executor(
            None, lambda: prompt_ids(template, question, self.tokenizer, self.apply_chat_template_kwargs)
        )
        return self._cap_text_prompt_length(ids)
