"""The math grader: answer extraction and math-verify equivalence in killable worker processes.
It scores correctness only and imports nothing from verl or the rest of this project; the training
reward built on it (format and length terms, verl's reward manager) is recipes/methods/reward.py. See
`grader.grade` for the contract."""

from grader.extract import Extraction, extract_answer, normalize_ground_truth
from grader.grade import Grader, compute_score, get_grader, grade_batch

__all__ = [
    "Extraction",
    "Grader",
    "compute_score",
    "extract_answer",
    "get_grader",
    "grade_batch",
    "normalize_ground_truth",
]
