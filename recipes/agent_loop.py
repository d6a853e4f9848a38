"""verl agent loop `recipes_prompt_variants`: each rollout's prompt built from its own variant.

verl gives every dataset row one `uid` and runs `rollout.n` sessions of the row's agent loop
(`session_id` 0..n-1); GRPO normalizes over the uid. Variants of one question (prompt-augmentation
templates; later TA-GRPO rephrasings) therefore live in one row, and this loop picks the variant
of each session and builds the prompt ids that reach generation. verl's default loop re-applies
the tokenizer's chat template to `raw_prompt`, so the template cannot come from the tokenizer.

Prompt augmentation (METHODS.md section 1), on when `recipes.prompt_aug` is set
(configs/method/prompt_aug.yaml selects this loop with `rollout.agent.default_agent_loop`):
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

from prompt_aug.sampling import TemplateSampler, make_sampler
from prompt_aug.templates import prompt_ids

AGENT_NAME = "recipes_prompt_variants"
EPOCH_KEY = "recipes_epoch"  # per-row dataloader pass, set by recipes/trainer.py on training batches


def sampler_from_config(config) -> TemplateSampler | None:
    """The template sampler of `recipes.prompt_aug`, or None when prompt augmentation is off."""
    settings = OmegaConf.select(config, "recipes.prompt_aug")
    if settings is None:
        return None
    return make_sampler(OmegaConf.to_container(settings, resolve=True))


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


@register(AGENT_NAME)
class PromptVariantAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn loop with the prompt ids built from this session's variant."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sampler = sampler_from_config(self.config)
        if self.sampler is None:
            raise ValueError(f"agent loop {AGENT_NAME!r} needs recipes.prompt_aug (method=prompt_aug)")
        self._prompt: tuple[str, str] | None = None

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> Any:
        template, training = choose_template(self.sampler, kwargs)
        self._prompt = (template, question_of(kwargs))
        output = await super().run(sampling_params, **kwargs)
        if training:
            output.extra_fields["template"] = template
        return output

    async def ct_build_initial_tokens(self, messages: list[dict], **_multimodal: Any) -> list[int]:
        template, question = self._prompt
        ids = await self.loop.run_in_executor(
            None, lambda: prompt_ids(template, question, self.tokenizer, self.apply_chat_template_kwargs)
        )
        return self._cap_text_prompt_length(ids)
