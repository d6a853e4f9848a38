"""verl reward manager `math_pool`: our grader plugged into verl's reward loop.

Select it with `reward.reward_manager.name=math_pool` (loaded in every verl process through the
`verl.plugins` entry point in pyproject.toml). Settings come from verl's usual place for reward
keyword arguments, `reward.custom_reward_function.reward_kwargs` (mode, timeout_s, num_workers,
format_weight: see `rewards.grader.compute_score`), so they are the same whether a run uses this
manager or `custom_reward_function.path=pkg://rewards.grader`.

Why a manager and not only the function: verl's reward loop grades a chunk of samples with
`asyncio.gather` over `run_single`. The built-in managers run a blocking reward function in a
thread each; this one awaits the grading pool's future instead, so a whole chunk is in the pool
at once, the ground truth is parsed once per question, and no thread sits blocked on a hung
sample.
"""

from __future__ import annotations

import asyncio

from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from rewards.grader import get_grader

_KWARGS = (
    "mode",
    "timeout_s",
    "num_workers",
    "format_weight",
    "overlong_buffer_len",
    "overlong_penalty_factor",
)


def reward_kwargs_from_config(config) -> dict:
    """Our grader settings from `reward.custom_reward_function.reward_kwargs` (unknown keys fail)."""
    crf = config.get("reward", {}).get("custom_reward_function") or {}
    kwargs = dict(crf.get("reward_kwargs") or {})
    unknown = sorted(set(kwargs) - set(_KWARGS))
    if unknown:
        raise ValueError(
            f"reward.custom_reward_function.reward_kwargs: unknown keys {unknown}; known: {list(_KWARGS)}"
        )
    return kwargs


@register("math_pool")
class PooledMathRewardManager(RewardManagerBase):
    def __init__(
        self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None
    ):
        super().__init__(config, tokenizer, compute_score)
        kwargs = reward_kwargs_from_config(config)
        self.grader = get_grader(kwargs.pop("num_workers", None), kwargs.pop("timeout_s", None))
        self.mode = kwargs.get("mode", "lenient")
        self.format_weight = float(kwargs.get("format_weight", 1.0))
        # DAPO's overlong reward shaping (Yu et al. 2025, eq. 13): a response longer than
        # max_len - buffer loses up to `overlong_penalty_factor`, linearly over the last
        # `overlong_buffer_len` tokens; 0 turns it off.
        self.overlong_len = int(kwargs.get("overlong_buffer_len", 0))
        self.overlong_factor = float(kwargs.get("overlong_penalty_factor", 1.0))
        self.max_resp_len = int(config.actor_rollout_ref.rollout.response_length) if self.overlong_len else 0
        if self.overlong_len and not 0 < self.overlong_len < self.max_resp_len:
            raise ValueError(
                f"overlong_buffer_len={self.overlong_len} must be in (0, rollout.response_length="
                f"{self.max_resp_len})"
            )

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1]  # for multi-turn outputs verl grades the last sequence
        response_ids = item.batch["responses"]
        valid_len = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
        text = self.tokenizer.decode(response_ids[:valid_len], skip_special_tokens=True)
        ground_truth = item.non_tensor_batch["reward_model"]["ground_truth"]
        extra_info = item.non_tensor_batch.get("extra_info", None)
        # prompt augmentation: the agent loop (recipes/agent_loop.py) names the session's template
        template = (item.non_tensor_batch.get("tool_extra_fields") or {}).get("template")
        if template:
            extra_info = {**(extra_info or {}), "template": template}
        future = self.grader.submit(
            text, ground_truth, extra_info=extra_info, mode=self.mode, format_weight=self.format_weight
        )
        result = dict(await asyncio.wrap_future(future))
        if self.overlong_len:
            exceed = valid_len - (self.max_resp_len - self.overlong_len)
            penalty = min(-exceed / self.overlong_len * self.overlong_factor, 0.0)
            result["overlong_penalty"] = penalty
            result["score"] += penalty
        return {"reward_score": result["score"], "reward_extra_info": result}
