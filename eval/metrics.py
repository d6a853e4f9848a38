"""The numbers an evaluation reports: the unbiased pass@k estimator and the two averages.

Inputs are 0/1 verdicts `correct[benchmark][question_id] = [v_0, ..., v_{R-1}]`, one per repeat
(greedy decoding run R times) or per sample (n samples at a temperature). Every value is a fraction
in [0, 1]; the tables print percent.

Accuracy of benchmark b in run r: acc(b, r) = mean over b's questions of v_r. Two averages, as the
prompt-augmentation paper reports them (docs/methods.md#prompt-augmentation):
  per-benchmark average   mean over benchmarks of acc(b, r): every benchmark weighs the same
                          (AIME's 30 questions as much as MATH500's 500);
  per-question average    all questions of all benchmarks pooled: every question weighs the same.
Each is computed per run r and reported as the mean over runs with its spread (population standard
deviation, min and max of the R run values). With greedy decoding on vLLM the runs differ only by
engine nondeterminism ("greedy avg@5"); with transformers on a CPU they are identical (spread 0).

pass@k (sampling only): the mean over questions of `pass_at_k(n, c, k)`, then averaged the same two
ways (over benchmarks, or over all questions pooled).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k),
    the probability that k samples drawn without replacement from the n include a correct one
    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1; the TA-GRPO
    paper's Appendix D). Exact integer binomials, one rounding at the end."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"pass_at_k: {name} must be an int, got {value!r}")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got n={n}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def spread(values: Sequence[float]) -> dict:
    """Mean, population standard deviation, min and max of run values, and the values themselves."""
    if not values:
        raise ValueError("spread of no values")
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {"mean": mean, "std": std, "min": min(values), "max": max(values), "runs": list(values)}


def _check(correct: Mapping[str, Mapping[str, Sequence[int]]]) -> int:
    """The common number of verdicts per question; raises if questions differ or a benchmark is empty."""
    runs = None
    for bench, questions in correct.items():
        if not questions:
            raise ValueError(f"benchmark {bench!r} has no questions")
        for qid, verdicts in questions.items():
            if runs is None:
                runs = len(verdicts)
            if len(verdicts) != runs or runs == 0:
                raise ValueError(
                    f"{bench} question {qid!r} has {len(verdicts)} verdicts, expected {runs} like the others"
                )
    if runs is None:
        raise ValueError("no benchmarks")
    return runs


def summarize(correct: Mapping[str, Mapping[str, Sequence[int]]], ks: Sequence[int] = ()) -> dict:
    """Per-benchmark accuracy with its spread over runs, pass@k for each k in `ks`, and both
    averages (module docstring). Every question must have the same number of verdicts R >= max(ks)."""
    runs = _check(correct)
    bad = [k for k in ks if not 1 <= k <= runs]
    if bad:
        raise ValueError(f"pass@k needs 1 <= k <= {runs} (samples per question), got k={bad}")
    benches: dict[str, dict] = {}
    pooled_hits = [0] * runs
    pooled_questions = 0
    pooled_pass = {k: 0.0 for k in ks}
    for bench, questions in correct.items():
        hits = [sum(int(v[r]) for v in questions.values()) for r in range(runs)]
        q = len(questions)
        passes = {k: sum(pass_at_k(runs, sum(map(int, v)), k) for v in questions.values()) for k in ks}
        benches[bench] = {
            "questions": q,
            "runs": runs,
            "accuracy": spread([h / q for h in hits]),
            "pass_at_k": {str(k): passes[k] / q for k in ks},
        }
        pooled_hits = [a + b for a, b in zip(pooled_hits, hits, strict=True)]
        pooled_questions += q
        for k in ks:
            pooled_pass[k] += passes[k]
    names = list(benches)
    per_bench_runs = [sum(benches[b]["accuracy"]["runs"][r] for b in names) / len(names) for r in range(runs)]
    return {
        "benchmarks": benches,
        "per_benchmark_average": {
            "benchmarks": len(names),
            "accuracy": spread(per_bench_runs),
            "pass_at_k": {
                str(k): sum(benches[b]["pass_at_k"][str(k)] for b in names) / len(names) for k in ks
            },
        },
        "per_question_average": {
            "questions": pooled_questions,
            "accuracy": spread([h / pooled_questions for h in pooled_hits]),
            "pass_at_k": {str(k): pooled_pass[k] / pooled_questions for k in ks},
        },
    }
