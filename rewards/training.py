"""The training reward, in one place: its formula.

    score = acc + format_weight * format_score + overlong_penalty        (`training_reward`)

  acc               the grader's 0/1 correctness (rewards/grade.py: math-verify in killable workers)
  format_score      prompt augmentation: the format score of the rollout's template
                    (prompt_aug/templates.py), 0 when the rollout had no template
  overlong_penalty  DAPO's overlong reward shaping (Yu et al. 2025, arXiv 2503.14476, sec. 3.4,
                    eq. 13), 0 when off

Its settings (`format_weight`, the overlong buffer, the grading mode) are
recipes/reward_settings.py; verl's reward manager that computes it for every rollout is
`math_pool` (recipes/extensions/reward_manager.py). Imports nothing.
"""

from __future__ import annotations

from collections.abc import Mapping


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
