"""The math grader: answer extraction and math-verify equivalence in killable worker processes.
It scores correctness only and imports nothing from verl or the rest of this project; the training
reward built on it (format and length terms, verl's reward manager) is recipes/methods/reward.py. See
`grader.grade` for the contract.

`grader.grade` (math-verify, sympy, the pool) is imported on first use of its names, so that the
string work of `grader.extract` (the data validator's ground-truth check) costs no sympy import."""

from grader.extract import Extraction, check_ground_truth, extract_answer, normalize_ground_truth

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
        from grader import grade

        return getattr(grade, name)
    raise AttributeError(f"module 'grader' has no attribute {name!r}")
