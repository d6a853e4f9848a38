"""verl's reward manager `math_pool`: the training reward (rewards/training.py) of every rollout.

Select it with `reward.reward_manager.name=math_pool` (configs/train.yaml does; verl loads it in
every process through the `verl.plugins` entry point, recipes/extensions/plugins.py).

Why a manager and not only a reward function: verl's reward loop grades a chunk of samples with
`asyncio.gather` over `run_single`. The built-in managers run a blocking reward function in a
thread each; this one awaits the grading pool's future instead, so a whole chunk is in the pool
at once, the ground truth is parsed once per question, and no thread sits blocked on a hung
sample. (`custom_reward_function.path=pkg://rewards.grade` also works, for correctness alone.)
"""

from __future__ import annotations

import asyncio

from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from prompt_aug.templates import format_score
from recipes.reward_settings import settings
from rewards.grade import get_grader
from rewards.training import overlong_penalty, training_reward


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
        # prompt augmentation: the agent loop (recipes/extensions/agent_loop.py) names the session's template
        template = (item.non_tensor_batch.get("tool_extra_fields") or {}).get("template")
        fmt = format_score(template, text) if template else 0.0
        penalty = overlong_penalty(
            length, self.max_resp_len, s.overlong_buffer_len, s.overlong_penalty_factor
        )
        result = training_reward(grade, fmt, penalty, s.format_weight)
        return {"reward_score": result["score"], "reward_extra_info": result}
