"""verl agent loop `recipes_prompt_variants`, the default of every run (configs/train.yaml): verl's
single-turn loop, plus each rollout's prompt built by the active methods and, with
`recipes.deterministic`, each request's own vLLM seed (recipes/platforms/determinism.py).

verl gives every dataset row one `uid` and runs `rollout.n` sessions of the row's agent loop
(`session_id` 0..n-1); GRPO normalizes over the uid. Variants of one question (prompt-augmentation
templates, TA-GRPO rephrasings) therefore live in one row, and this loop builds the prompt ids of
each session. Each session's `Prompt` (recipes/methods/base.py) starts as the row's question in the
dataset's own prompt; every active method's `prompts` hook may change it (the question shown, a
template around it, the question the response is trained under, extra_fields to record). verl's
default loop re-applies the tokenizer's chat template to `raw_prompt`, so a template cannot come
from the tokenizer: with one, the prompt is the templates package's `prompt_ids(template, question)`;
without, the dataset's messages with the question swapped in.

Training rows are told apart by `recipes_epoch`, which recipes/extensions/trainer.py adds to every batch it
fetches; validation batches do not pass through that code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from prompt_aug.templates import prompt_ids
from recipes.methods import registry
from recipes.methods.base import EPOCH_KEY, Prompt
from recipes.platforms import determinism
from recipes.settings import ConfigError

AGENT_NAME = "recipes_prompt_variants"


class PromptError(ValueError):
    """A dataset prompt that the question cannot be swapped into."""


def check_prompt_loop(cfg, names: list[str]) -> None:
    """Methods `names` change each rollout's prompt in this agent loop, which needs our trainer's epochs."""
    loop = OmegaConf.select(cfg, "actor_rollout_ref.rollout.agent.default_agent_loop")
    if loop != AGENT_NAME:
        raise ConfigError(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={loop}: method(s) {', '.join(names)} "
            f"build each rollout's prompt in the agent loop {AGENT_NAME!r}."
        )


def question_of(row: dict[str, Any]) -> str:
    """The raw question (no instruction) of a dataset row: `extra_info.question` (docs/data.md)."""
    extra = row.get("extra_info")
    question = extra.get("question") if isinstance(extra, dict) else None
    if not isinstance(question, str) or not question:
        raise KeyError(
            f"row {row.get('index')!r} of data source {row.get('data_source')!r} has no extra_info.question: "
            "templates need the question without the dataset's instruction (prepare data with "
            "`python -m recipes.tools.data`, see docs/data.md)"
        )
    return question


def swap_question(messages: Sequence[Mapping[str, str]], original: str, replacement: str) -> list[dict]:
    """The dataset's chat messages with the original question in the last user turn replaced (its
    instruction text, before or after the question, stays)."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            if original not in m["content"]:
                raise PromptError(
                    "the last user message does not contain extra_info.question verbatim, so the "
                    "rephrasing cannot take its place"
                )
            m["content"] = m["content"].replace(original, replacement, 1)
            return out
    raise PromptError("the prompt has no user message")


def request_seed(seed: int, row: dict[str, Any]) -> int:
    """The vLLM seed of one session of a dataset row: (seed, epoch, row, session) for training
    rows, (seed, "val", row, session) for validation rows (recipes/platforms/determinism.py)."""
    where = row[EPOCH_KEY] if EPOCH_KEY in row else "val"
    return determinism.request_seed(seed, where, int(row["index"]), int(row["session_id"]))


@register(AGENT_NAME)
class PromptVariantAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn loop with each session's prompt ids built from its `Prompt`, and the
    response stored under the question the methods train it under."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prompt_hooks = registry.prompt_hooks(self.config)
        self.deterministic = determinism.enabled(self.config)
        self._prompt: Prompt | None = None  # the prompt the next ct_build_initial_tokens builds

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> Any:
        if self.deterministic:
            sampling_params = {**sampling_params, "seed": request_seed(self.rollout_config.seed, kwargs)}
        if not self.prompt_hooks:  # verl's loop, as it is
            return await super().run(sampling_params, **kwargs)
        original = question_of(kwargs)
        prompt = Prompt(original=original, question=original)
        for hook in self.prompt_hooks:
            hook(prompt, kwargs, EPOCH_KEY in kwargs, self.rollout_config.n)
        self._prompt = prompt
        output = await super().run(sampling_params, **kwargs)
        if prompt.trained_under is not None:
            prompt.extra["generation_prompt_ids"] = list(output.prompt_ids)  # for the rollout dump
            self._prompt = replace(prompt, question=prompt.trained_under)
            output.prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        if not prompt.rollout_log_probs:
            output.response_logprobs = None
        output.extra_fields.update(prompt.extra)
        return output

    async def ct_build_initial_tokens(self, messages: list[dict], **multimodal: Any) -> list[int]:
        prompt = self._prompt
        if prompt is None or prompt.template is None:  # the dataset's prompt, with the question shown in it
            if prompt is not None and prompt.question != prompt.original:
                messages = swap_question(messages, prompt.original, prompt.question)
            return await super().ct_build_initial_tokens(messages, **multimodal)
        ids = await self.loop.run_in_executor(
            None,
            lambda: prompt_ids(
                prompt.template, prompt.question, self.tokenizer, self.apply_chat_template_kwargs
            ),
        )
        return self._cap_text_prompt_length(ids)
