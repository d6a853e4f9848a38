"""The training reward, in one place, and verl's reward manager `math_pool` that computes it.

    score = acc + format_weight * format_score + overlong_penalty        (`training_reward`)

  acc               the grader's 0/1 correctness (rewards/: math-verify in killable workers)
  format_score      prompt augmentation: the format score of the rollout's template
                    (prompt_aug/templates.py), 0 when the rollout had no template
  overlong_penalty  DAPO's overlong reward shaping (Yu et al. 2025, eq. 13), 0 when off

Select the manager with `reward.reward_manager.name=math_pool` (configs/train.yaml does; verl
loads it in every process through the `verl.plugins` entry point, recipes/plugins.py). Its
settings are verl's usual reward keyword arguments, `reward.custom_reward_function.reward_kwargs`
(`RewardSettings` below; docs/settings.md), checked before Ray starts by `settings`.

Why a manager and not only a reward function: verl's reward loop grades a chunk of samples with
`asyncio.gather` over `run_single`. The built-in managers run a blocking reward function in a
thread each; this one awaits the grading pool's future instead, so a whole chunk is in the pool
at once, the ground truth is parsed once per question, and no thread sits blocked on a hung
sample. (`custom_reward_function.path=pkg://rewards.grader` also works, for correctness alone.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from prompt_aug.templates import format_score
from recipes.prompt_augmentation import PAPER as PROMPT_AUG
from recipes.settings import ConfigError, load, setting
from rewards.grader import default_num_workers, default_timeout_s, get_grader

SECTION = "reward.custom_reward_function.reward_kwargs"
DAPO = "Yu et al. 2025 (DAPO), arXiv 2503.14476, sec. 3.4, eq. 13"


@dataclass(frozen=True)
class RewardSettings:
    mode: Literal["lenient", "boxed"] = setting(
        "lenient",
        None,
        "which answer counts: lenient = the last \\boxed{}, else 'the answer is ...', else the last number "
        "(training, as the prompt-augmentation authors' reward); boxed = only a \\boxed{} answer (evaluation)",
    )
    timeout_s: float | None = setting(
        None,
        "in (0, 300]",
        "time limit of one math-verify task (no setting removes it); null: 5 s or $RECIPES_GRADER_TIMEOUT_S",
    )
    num_workers: int | None = setting(
        None, "in [1, 256]", "grading processes; null: $RECIPES_GRADER_WORKERS, else the cores (at most 8)"
    )
    format_weight: float = setting(
        1.0,
        ">= 0",
        "weight of the template's format score in the reward (prompt augmentation); 0 = the no-format "
        "ablation. Responses shown no template earn no format score",
        PROMPT_AUG,
    )
    overlong_buffer_len: int = setting(
        0,
        ">= 0",
        "overlong reward shaping: a response longer than rollout.response_length minus this many "
        "tokens loses reward linearly over them; 0 = off",
        DAPO,
    )
    overlong_penalty_factor: float = setting(
        1.0, ">= 0", "the penalty at the full response length (overlong reward shaping)", DAPO
    )


def settings(cfg) -> RewardSettings:
    """The reward settings of a run's config; ConfigError names a bad key, type or range, or an
    overlong buffer that does not fit in the response length."""
    raw = OmegaConf.select(cfg, SECTION)
    raw = OmegaConf.to_container(raw, resolve=True) if raw is not None else {}
    s = load(RewardSettings, raw, SECTION)
    try:  # what null leaves to the environment, checked before Ray: a worker would fail on it late
        if s.timeout_s is None:
            default_timeout_s()
        if s.num_workers is None:
            default_num_workers()
    except ValueError as exc:
        raise ConfigError(f"{exc} ({SECTION}.timeout_s and .num_workers override it).") from None
    if s.overlong_buffer_len:
        max_len = int(OmegaConf.select(cfg, "actor_rollout_ref.rollout.response_length"))
        if not s.overlong_buffer_len < max_len:
            raise ConfigError(
                f"{SECTION}.overlong_buffer_len={s.overlong_buffer_len} must be in (0, "
                f"actor_rollout_ref.rollout.response_length={max_len})."
            )
    return s


def overlong_penalty(length: int, max_len: int, buffer_len: int, factor: float) -> float:
    """DAPO eq. 13: 0 up to max_len - buffer_len tokens, then falling linearly to -factor at
    max_len (buffer_len 0: no shaping)."""
    if not buffer_len:
        return 0.0
    return min((max_len - buffer_len - length) / buffer_len * factor, 0.0)


def training_reward(grade: Mapping, format_score: float, penalty: float, format_weight: float) -> dict:
    """The reward of one response: the grader's result with the format score, the overlong
    penalty and `score` = acc + format_weight * format_score + penalty."""
    return {
        **grade,
        "format_score": float(format_score),
        "overlong_penalty": float(penalty),
        "score": float(grade["acc"]) + format_weight * format_score + penalty,
    }


@register("math_pool")
class PooledMathRewardManager(RewardManagerBase):
    def __init__(
        self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None
    ):
        super().__init__(config, tokenizer, compute_score)
        self.settings = settings(config)
        self.grader = get_grader(self.settings.num_workers, self.settings.timeout_s)
        self.max_resp_len = int(config.actor_rollout_ref.rollout.response_length)

    async def run_single(self, data: DataProto) -> dict:
        s = self.settings
        item = data[-1]  # for multi-turn outputs verl grades the last sequence
        response_ids = item.batch["responses"]
        length = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
        text = self.tokenizer.decode(response_ids[:length], skip_special_tokens=True)
        ground_truth = item.non_tensor_batch["reward_model"]["ground_truth"]
        grade = await asyncio.wrap_future(self.grader.submit(text, ground_truth, mode=s.mode))
        # prompt augmentation: the agent loop (recipes/agent_loop.py) names the session's template
        template = (item.non_tensor_batch.get("tool_extra_fields") or {}).get("template")
        fmt = format_score(template, text) if template else 0.0
        penalty = overlong_penalty(
            length, self.max_resp_len, s.overlong_buffer_len, s.overlong_penalty_factor
        )
        result = training_reward(grade, fmt, penalty, s.format_weight)
        return {"reward_score": result["score"], "reward_extra_info": result}
