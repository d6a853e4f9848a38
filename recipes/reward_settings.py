"""The training reward's settings: verl's usual reward keyword arguments,
`reward.custom_reward_function.reward_kwargs` (docs/settings.md), checked before Ray starts by
`settings`. The formula they feed is rewards/training.py; verl's reward manager that computes it
for every rollout is `math_pool` (recipes/extensions/reward_manager.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from omegaconf import OmegaConf

from prompt_aug import PAPER as PROMPT_AUG
from recipes.settings import ConfigError, load, setting
from rewards.grade import default_num_workers, default_timeout_s

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
        None,
        "in [1, 256]",
        "grading processes; null: $RECIPES_GRADER_WORKERS, else the cores, at least 4 and at most 8",
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
