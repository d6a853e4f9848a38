"""Math rewards for verl: answer extraction, math-verify equivalence in killable worker
processes, and template format rewards. See `rewards.grader` for the contract."""

from rewards.extract import Extraction, extract_answer, normalize_ground_truth
from rewards.format import FormatRule, register_format_rule
from rewards.grader import Grader, compute_score, get_grader, grade_batch

__all__ = [
    "Extraction",
    "FormatRule",
    "Grader",
    "compute_score",
    "extract_answer",
    "get_grader",
    "grade_batch",
    "normalize_ground_truth",
    "register_format_rule",
]
