"""Rewards: the math grader and the training reward built on it.

  extract.py    answer extraction (string work only: the data validator's ground-truth check)
  grade.py      math-verify equivalence in killable worker processes; scores correctness only and
                imports nothing from verl or the rest of this project (see its contract)
  training.py   the training reward: acc + format_weight * format_score + overlong penalty, and its
                settings (verl's reward manager `math_pool` calls it for every rollout)

`rewards.grade` (math-verify, sympy, the pool) is imported on first use of its names, so that the
string work of `rewards.extract` costs no sympy import. The old package name `grader` works for one
release."""

from rewards.extract import Extraction, check_ground_truth, extract_answer, normalize_ground_truth

_GRADE_NAMES = ("Grader", "compute_score", "get_grader", "grade_batch")

__all__ = [
    "Extraction",
    "check_ground_truth",
    "extract_answer",
    "normalize_ground_truth",
    *_GRADE_NAMES,
]


def __getattr__(name: str):
    if name in _GRADE_NAMES:
        from rewards import grade

        return getattr(grade, name)
    raise AttributeError(f"module 'grader' has no attribute {name!r}")
