"""Hostile model output: each input returns a score within the time limit, never raises, never
runs code; hung and killed workers are replaced and the pool keeps working."""

import contextlib
import gc
import math
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import pytest

from grader import compute_score
from grader.extract import MAX_ANSWERS, MAX_NESTING, nesting_depth, normalize_ground_truth
from grader.grade import ENV_TIMEOUT, Grader, default_timeout_s

REPO_ROOT = Path(__file__).resolve().parents[1]
# The `grader` fixture (conftest) and the compute_score calls below use this time limit.
TEST_TIMEOUT_S = 2.0
# One hung task costs one time limit; a hostile sample needs at most its verify task (the
# ground truth "1" parses at once) plus worker replacement and a loaded CI machine.
BOUND_S = TEST_TIMEOUT_S + 3.0

DEEP = "(" * 5000 + "1" + ")" * 5000
HOSTILE = {
    "power_tower": "\\boxed{9^{9^{9^9}}}",
    "power_tower_10": "\\boxed{10^{10^{10}}}",
    "deep_parens_phrase": "The answer is " + DEEP,
    "deep_parens_boxed": "\\boxed{" + "(" * 2000 + "1" + ")" * 2000 + "}",
    "deep_parens_bare": DEEP,
    "one_megabyte": "word " * 200_000 + "\\boxed{1}",
    "two_thousand_boxes": "\\boxed{2} " * 1999 + "\\boxed{1}",
    "two_thousand_open_boxes": "\\boxed{" * 2000,
    # the 1 MB cases: quadratic extraction took 38-63 s on the first
    "open_boxes_1mb": "\\boxed{" * 150_000,
    "nested_braces_1mb": "\\boxed{" + "{" * 500_000 + "1" + "}" * 500_000 + "}",
    "digits_1mb": "1" * 1_000_000,
    "invalid_utf8": b"\\boxed{1}\xff\xfe\xc3",
    "lone_surrogates": "\\boxed{1}\ud800\udfff",
    "empty": "",
    "none": None,
    "deep_braces": "\\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}",
    "huge_number": "\\boxed{" + "9" * 3000 + "}",
    "factorial_tower": "\\boxed{(10^{10})!}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_response_is_bounded(grader, name):
    t0 = time.perf_counter()
    result = grader.grade(HOSTILE[name], "1", mode="lenient")
    elapsed = time.perf_counter() - t0
    assert elapsed < BOUND_S, f"{name} took {elapsed:.1f}s"
    assert set(result) >= {"score", "acc", "pred", "timed_out", "status"}
    assert math.isfinite(result["score"])
    assert result["status"] in {"ok", "no_answer", "timeout", "error", "too_deep"}
    if name in {"one_megabyte", "two_thousand_boxes", "invalid_utf8", "lone_surrogates"}:
        assert result["acc"] == 1.0, result  # the real answer is still found
    if name in {"empty", "none", "two_thousand_open_boxes", "open_boxes_1mb"}:
        assert result["status"] == "no_answer"
    if name in {"power_tower", "power_tower_10"}:
        assert result["acc"] == 0.0


def cpu_seconds(fn, *args) -> float:
    """This thread's CPU time for fn(*args), the garbage collector held off: neither a busy machine
    nor the xdist worker's other threads (torch, Ray, left by earlier tests) count. Process time
    counted them: CI failed once at 1.1 s for an extraction that takes 0.1 s."""
    gc.collect()
    gc.disable()
    t0 = time.thread_time()
    try:
        fn(*args)
    finally:
        elapsed = time.thread_time() - t0
        gc.enable()
    return elapsed


@pytest.mark.parametrize("name", sorted(n for n in HOSTILE if HOSTILE[n] and len(HOSTILE[n]) > 500_000))
def test_extraction_is_linear_on_a_megabyte(name):
    """Extraction runs in the trainer's reward loop, outside any killable task: it must stay
    linear whatever the model wrote (the old nested brace scan took a minute on these)."""
    from grader.extract import extract_answer

    # linear takes ~0.1 s on a 2-core EPYC, the quadratic scan took 38-63 s
    assert cpu_seconds(extract_answer, HOSTILE[name]) < 2.0


INJECTIONS = [
    "\\boxed{__import__('os').system('touch {T}')}",
    "$__import__('os').system('touch {T}')$",
    "The answer is __import__('os').system('touch {T}')",
    "\\boxed{eval(\"__import__('os').system('touch {T}')\")}",
    "\\boxed{exec(\"import os; os.system('touch {T}')\")}",
    "\\boxed{Lambda(x, __import__('os').system('touch {T}'))}",
    "\\boxed{\\text{__import__('os').system('touch {T}')}}",
    "\\boxed{sympify(\"__import__('os').system('touch {T}')\")}",
    "\\boxed{x.__class__.__base__.__subclasses__()}",
]


@pytest.mark.parametrize("template", INJECTIONS)
@pytest.mark.parametrize("gold", ["4242", "x"])  # not a number that occurs in tmp_path
def test_model_output_is_never_run_as_code(grader, tmp_path, template, gold):
    target = tmp_path / "pwned"
    response = template.replace("{T}", str(target))
    result = grader.grade(response, gold)
    assert not target.exists(), f"code ran: {response}"
    assert result["acc"] == 0.0


@pytest.mark.parametrize("gold", ["", "   ", None, [], "$$", "['']"])
def test_empty_ground_truth_scores_zero_with_reason(grader, gold):
    result = grader.grade("\\boxed{1}", gold)
    assert result["score"] == 0.0
    assert result["status"] == "bad_ground_truth"


@pytest.mark.parametrize(
    "gold,status",
    [
        ("(" * 2000 + "1" + ")" * 2000, "bad_ground_truth"),  # nested past MAX_NESTING: not an answer
        ("9^{9^{9^9}}", "timeout"),  # it parses, but comparing with it hangs
    ],
)
def test_hanging_ground_truth_scores_zero_with_reason(grader, gold, status):
    t0 = time.perf_counter()
    result = grader.grade("\\boxed{1}", gold)
    assert time.perf_counter() - t0 < BOUND_S
    assert result["status"] == status and result["score"] == 0.0


def continued(levels: int, inner: str = "2") -> str:
    """`levels` nested \\frac{1}{...} around `inner`: worth `inner` for an even count."""
    for _ in range(levels):
        inner = "\\frac{1}{" + inner + "}"
    return inner


@pytest.mark.parametrize("levels", [106, 400])
def test_an_answer_nested_past_the_safe_depth_is_too_deep_not_a_wrong_verdict(grader, levels):
    """math-verify grades 106 or more levels of \\frac{1}{...} around 2 (worth 2) equal to 1/2 and
    not equal to 2; past MAX_NESTING the grader says it cannot tell, for either ground truth."""
    answer = f"\\boxed{{{continued(levels)}}}"
    for gold in ("2", "1/2"):
        result = grader.grade(answer, gold)
        assert (result["status"], result["acc"]) == ("too_deep", 0.0), (gold, result)


def test_an_answer_within_the_safe_depth_is_graded():
    """Right at MAX_NESTING math-verify still decides, and decides right."""
    answer = f"\\boxed{{{continued(MAX_NESTING - 1)}}}"  # the \\boxed{} brace is one level more
    assert nesting_depth(answer) == MAX_NESTING
    g = Grader(num_workers=1, timeout_s=60.0)  # a deep parse is slow, not wrong
    try:
        result = g.grade(answer, "1/2")  # 49 levels: worth 1/2
    finally:
        g.close()
    assert (result["status"], result["acc"]) == ("ok", 1.0), result


@pytest.mark.parametrize(
    "gold", [math.nan, math.inf, -math.inf, "nan", "NaN", [math.nan], list(range(MAX_ANSWERS + 1))]
)
def test_a_nan_infinite_or_oversized_ground_truth_is_bad(grader, gold):
    """A NaN ground truth accepted \\boxed{nan}; a 60,000-item list took 36 s outside the limit."""
    t0 = time.perf_counter()
    result = grader.grade("\\boxed{nan}", gold)
    assert (result["status"], result["acc"]) == ("bad_ground_truth", 0.0)
    assert time.perf_counter() - t0 < BOUND_S


def test_a_huge_ground_truth_list_is_refused_before_it_is_read():
    gold = [str(i) for i in range(60_000)]

    def refuse():
        with pytest.raises(ValueError, match="60000 answers, more than 64"):
            normalize_ground_truth(gold)

    assert cpu_seconds(refuse) < 0.1


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e9", "abc", ""])
def test_no_setting_removes_the_grading_time_limit(value, monkeypatch):
    """NaN or inf passed the old `<= 0` check and switched the limit off (a power tower then
    graded for 40+ s)."""
    monkeypatch.setenv(ENV_TIMEOUT, value)
    if value == "":  # unset in effect: the default
        assert default_timeout_s() == 5.0
        return
    with pytest.raises(
        ValueError, match=r"RECIPES_GRADER_TIMEOUT_S=.* must be a number of seconds in \(0, 300\]"
    ):
        default_timeout_s()
    for bad in (math.nan, math.inf, 0, 301):
        with pytest.raises(ValueError, match="must be a number of seconds"):
            Grader(num_workers=1, timeout_s=bad)


@pytest.mark.slow  # seconds of hung tasks, or fresh processes
def test_pool_survives_a_batch_with_eight_hanging_responses(grader):
    hanging = ["\\boxed{9^{9^{9^9}}}"] * 8
    honest = [f"\\boxed{{{k}}}" for k in range(8)]
    responses = [x for pair in zip(hanging, honest, strict=True) for x in pair]
    golds = [g for k in range(8) for g in ("5", str(k))]
    t0 = time.perf_counter()
    results = grader.grade_batch(responses, golds)
    elapsed = time.perf_counter() - t0
    # the bound: time limit x ceil(hanging / workers) + 5 s
    assert elapsed < TEST_TIMEOUT_S * math.ceil(8 / grader.num_workers) + 5.0, elapsed
    assert [r["status"] for r in results[0::2]] == ["timeout"] * 8
    assert all(r["timed_out"] for r in results[0::2])
    assert [r["acc"] for r in results[1::2]] == [1.0] * 8
    # and afterwards the pool still grades and has replaced its killed workers
    _wait_for_workers(grader)


def _wait_for_workers(grader, timeout=15.0):
    """Pebble replaces killed workers in the background: wait for a full set."""
    assert grader.grade("\\boxed{\\sqrt{4}}", "2")["acc"] == 1.0  # a task that needs the pool
    deadline = time.monotonic() + timeout
    while len(grader.worker_pids()) < grader.num_workers and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(grader.worker_pids()) == grader.num_workers


def _busy_worker_pids(grader, n=1, min_running_s=0.0, timeout=15.0):
    """PIDs of `n` workers that have been executing a task for at least `min_running_s`
    (pebble internals, tests only). Killing only these is deterministic: a worker inside a task
    holds none of the channel locks, whereas an idle one may hold the reader lock, and a SIGKILL
    then leaves it locked (pebble waits 60 s for it)."""
    manager = grader._get_pool()._pool_manager
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = time.time()
        pids = [
            t.worker_id
            for t in list(manager.task_manager.tasks.values())
            if t.worker_id and now - t.timestamp >= min_running_s
        ]
        if len(pids) >= n:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} workers busy for {min_running_s} s")


def test_worker_killed_mid_task_is_retried(grader):
    _wait_for_workers(grader)
    future = grader._schedule(time.sleep, (1.0,))  # 1 s, well under the 2 s limit
    victims = _busy_worker_pids(grader)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    assert future.result(timeout=20) is None  # retried on a fresh worker and finished
    _wait_for_workers(grader)
    assert not set(grader.worker_pids()) & set(victims)


def test_worker_killed_mid_batch_loses_no_honest_sample(grader):
    responses = ["\\boxed{9^{9^{9^9}}}"] * 2 + [f"\\boxed{{{k}+1}}" for k in range(30)]
    golds = ["5"] * 2 + [str(k + 1) for k in range(30)]
    _wait_for_workers(grader)
    futures = [grader.submit(r, g) for r, g in zip(responses, golds, strict=True)]
    # both workers stuck on the power towers (a gold parse or an honest verify takes ms)
    for pid in _busy_worker_pids(grader, n=2, min_running_s=0.3):
        os.kill(pid, signal.SIGKILL)
    results = [f.result(timeout=60) for f in futures]
    assert all(r["status"] in {"timeout", "error"} and r["acc"] == 0.0 for r in results[:2])
    assert [r["acc"] for r in results[2:]] == [1.0] * 30
    assert grader.grade("\\boxed{\\sqrt{9}}", "1+2")["acc"] == 1.0


@pytest.mark.slow  # seconds of hung tasks, or fresh processes
def test_compute_score_from_threads_like_verl():
    """verl calls the reward function through run_in_executor: many threads at once."""
    cases = [
        ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
        ("\\boxed{2}", "3", 0.0),
        ("\\boxed{9^{9^{9^9}}}", "1", 0.0),
    ] * 4
    with ThreadPoolExecutor(max_workers=8) as ex:
        futures = [
            ex.submit(compute_score, "math", r, g, None, timeout_s=TEST_TIMEOUT_S, num_workers=2)
            for r, g, _ in cases
        ]
        results = [f.result(timeout=60) for f in futures]
    assert [r["acc"] for r in results] == [c for _, _, c in cases]
    assert threading.current_thread() is threading.main_thread()


@pytest.mark.slow  # seconds of hung tasks, or fresh processes
def test_compute_score_from_a_process_pool():
    """Each child process of a user's pool gets its own grader (and its own worker pool)."""
    responses = ["\\boxed{0.5}", "\\boxed{7}", "\\boxed{10^{10^{10}}}"]
    golds = ["\\frac{1}{2}", "8", "1"]
    fn = partial(compute_score, "math", timeout_s=TEST_TIMEOUT_S, num_workers=1)
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as ex:
        results = list(ex.map(fn, responses, golds, timeout=120))
    assert [r["acc"] for r in results] == [1.0, 0.0, 0.0]
    assert results[2]["status"] == "timeout"


@pytest.mark.slow
def test_compute_score_from_a_ray_worker():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote
        def grade(response, gold):
            from grader import compute_score

            return compute_score("math", response, gold, timeout_s=TEST_TIMEOUT_S, num_workers=1)

        results = ray.get(
            [grade.remote("\\boxed{0.5}", "1/2"), grade.remote("\\boxed{9^{9^{9^9}}}", "1")], timeout=120
        )
    finally:
        ray.shutdown()
    assert results[0]["acc"] == 1.0
    assert results[1]["status"] == "timeout"


GRADE_AND_HANG = """
import os, sys, time
from grader.grade import Grader
if __name__ == "__main__":
    g = Grader(num_workers=2, timeout_s=120)
    futures = [g.submit("\\\\boxed{9^{9^{9^{9}}}}", str(k)) for k in range(2)]  # both workers busy
    while len(g.worker_pids()) < 2:
        time.sleep(0.05)
    print(" ".join(map(str, g.worker_pids())), flush=True)
    time.sleep(300)
"""


@pytest.mark.slow  # seconds of hung tasks, or fresh processes
def test_no_grading_process_outlives_a_sigkilled_parent(tmp_path):
    """Ray, the OOM killer and Slurm end processes with SIGKILL: the forkserver and the workers
    (here both inside a hanging verification) must go too, not burn a core each for minutes."""
    import subprocess
    import sys

    import psutil

    script = tmp_path / "grade.py"
    script.write_text(GRADE_AND_HANG)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    family = []
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        family = [p for p in psutil.Process(proc.pid).children(recursive=True)]
        assert len(workers) == 2 and set(workers) <= {p.pid for p in family}
        time.sleep(1.0)  # inside the power towers
        proc.kill()
        proc.wait()
        gone, alive = psutil.wait_procs(family, timeout=5)
        assert alive == [], [(p.pid, p.cmdline()[-1][:60]) for p in alive]
    finally:
        proc.kill()
        for p in family:  # whatever the assertion found alive
            with contextlib.suppress(psutil.Error):
                p.kill()
