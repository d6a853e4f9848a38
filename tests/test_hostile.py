"""Hostile model output: each input returns a score within the time limit, never raises, never
runs code; hung and killed workers are replaced and the pool keeps working."""

import contextlib
import gc
import math
import re
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pytest

from rewards import compute_score, grade_batch
from rewards.extract import (
    MAX_ANSWERS,
    MAX_BOXED_CHARS,
    MAX_NESTING,
    MAX_TEXT_CHARS,
    check_ground_truth,
    nesting_depth,
    normalize_ground_truth,
)
from rewards.grade import ENV_TIMEOUT, Grader, default_timeout_s, get_grader

REPO_ROOT = Path(__file__).resolve().parents[1]
# The `grader` fixture (conftest) and the compute_score calls below use this time limit.
TEST_TIMEOUT_S = 2.0
# One hung task costs one time limit; a hostile sample needs at most its verify task (the
# ground truth "1" parses at once) plus worker replacement on a loaded machine: factorial_tower took
# 6.4 s at a load average of 20 on 2 cores (5.0 s on the code before), so the slack is 10 s. Without
# the limit these inputs do not finish at all: the bound tells a bounded grader from a hung one, not
# how fast the machine is.
BOUND_S = TEST_TIMEOUT_S + 10.0

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
    # the issue's 1 MB cases: quadratic extraction took 38-63 s on the first
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
    "empty_boxes_1mb": "\\boxed{}" * 150_000,
    "nested_boxes": "\\boxed{" * 20_000 + "1" + "}" * 20_000,  # the innermost box is inside long ones
}


# The verdict on each, graded against "1": (status, acc, pred) in lenient mode (training), and in
# boxed mode (evaluation) where that differs. Why each is right:
VERDICTS = {
    # math-verify never finishes comparing these with 1 (sympy expands the tower, or (10^10)!): the
    # worker is killed at the time limit and the sample scores 0 (none of them is 1 either)
    "power_tower": ("timeout", 0.0, "9^{9^{9^9}}"),
    "power_tower_10": ("timeout", 0.0, "10^{10^{10}}"),
    "factorial_tower": ("timeout", 0.0, "(10^{10})!"),
    # 3,000 nines fit in a box but not in a plain number (40 digits at most): math-verify compares
    # 10^3000 - 1 with 1, quickly, and says no
    "huge_number": ("ok", 0.0, "9" * 3000),
    # 5,000 or 2,000 parentheses round 1 are worth 1, but past MAX_NESTING math-verify's verdicts
    # are wrong, so the grader says it cannot tell; in boxed mode a phrase is no answer
    "deep_parens_phrase": ("too_deep", 0.0, DEEP),
    "deep_parens_boxed": ("too_deep", 0.0, "(" * 2000 + "1" + ")" * 2000),
    # no box and no phrase: the last number, 1, which is right; boxed mode reads only boxes
    "deep_parens_bare": ("ok", 1.0, "1"),
    # past MAX_TEXT_CHARS only the tail's last box is read, and it holds the real answer
    "one_megabyte": ("ok", 1.0, "1"),
    "two_thousand_boxes": ("ok", 1.0, "1"),  # the last box, not the 1,999 before it
    "invalid_utf8": ("ok", 1.0, "1"),  # bad bytes replaced, the box intact
    "lone_surrogates": ("ok", 1.0, "1"),
    # no answer at all
    "empty": ("no_answer", 0.0, ""),
    "none": ("no_answer", 0.0, ""),
    # a million ones (not 1): past MAX_TEXT_CHARS any text may be the tail of a box, so no
    # fallback reads a number out of it
    "digits_1mb": ("no_answer", 0.0, ""),
    # the tail read is all closing braces (its box opened before it) or empty boxes
    "nested_braces_1mb": ("no_answer", 0.0, ""),
    "empty_boxes_1mb": ("no_answer", 0.0, ""),
    # the last box, or a box round it, holds more than MAX_BOXED_CHARS: never its tail or inside
    "two_thousand_open_boxes": ("box_too_long", 0.0, ""),
    "open_boxes_1mb": ("box_too_long", 0.0, ""),
    "deep_braces": ("box_too_long", 0.0, ""),
    "nested_boxes": ("box_too_long", 0.0, ""),
}
BOXED_VERDICTS = {
    **VERDICTS,
    "deep_parens_phrase": ("no_answer", 0.0, ""),
    "deep_parens_bare": ("no_answer", 0.0, ""),
}
# (name, mode): every input in lenient mode; in boxed mode those decided without the time limit
# (the towers' extraction is the same box in both modes, and each costs a time limit)
VERDICT_CASES = [(n, "lenient") for n in sorted(HOSTILE)] + [
    (n, "boxed") for n in sorted(HOSTILE) if BOXED_VERDICTS[n][0] != "timeout"
]


def test_every_hostile_response_has_a_verdict():
    assert set(VERDICTS) == set(HOSTILE)


@pytest.fixture(scope="module")
def patient_grader():
    """A grader whose limit no decidable input nears on a loaded machine (`huge_number` is decided
    in about 0.4 s at load 10): a verdict other than timeout must not turn into one under load."""
    g = Grader(num_workers=2, timeout_s=30.0)
    yield g
    g.close()


@pytest.mark.parametrize("name,mode", VERDICT_CASES)
def test_hostile_response_gets_its_verdict_in_time(grader, patient_grader, name, mode):
    status, acc, pred = (VERDICTS if mode == "lenient" else BOXED_VERDICTS)[name]
    t0 = time.perf_counter()
    result = (grader if status == "timeout" else patient_grader).grade(HOSTILE[name], "1", mode=mode)
    elapsed = time.perf_counter() - t0
    assert elapsed < BOUND_S, f"{name} took {elapsed:.1f}s"
    assert (result["status"], result["acc"], result["score"]) == (status, acc, acc), result
    assert result["pred"] == pred, result["pred"][:80]
    assert result["timed_out"] is (status == "timeout")


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
    from rewards.extract import extract_answer

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


def nested(levels: int, inner):
    """`inner` inside `levels` lists."""
    for _ in range(levels):
        inner = [inner]
    return inner


class Unprintable:
    def __str__(self):
        raise RuntimeError("no text")


# 2,105 (2,100 ones and a 5) in a box of 4,201 characters: the grader read its last number, 5
OVERLONG_SUM = "+".join(["1"] * 2100 + ["5"])
OVERLONG_BOX = "\\boxed{" + OVERLONG_SUM + "}"
# a box opened before the last MAX_TEXT_CHARS characters, its command cut in two by them ("\\bo|xed{")
CUT_COMMAND = "\\boxed{" + "1+" * ((MAX_TEXT_CHARS - 6) // 2) + "5}"
assert len(CUT_COMMAND) == MAX_TEXT_CHARS + 3
# Hostile input in the grader's arguments: (response, ground truth, status). Each is graded in both
# modes against a ground truth of 5 or with the response \boxed{5}: a grader that read the box's
# tail, an earlier box or the ground truth's first answers would credit it.
HOSTILE_ARGUMENTS = {
    # responses: a last box longer than MAX_BOXED_CHARS is no answer, never its tail or an earlier box
    "overlong_box": (OVERLONG_BOX, "5", "box_too_long"),
    "earlier_box_then_overlong_box": ("\\boxed{5} or rather " + OVERLONG_BOX, "5", "box_too_long"),
    "overlong_box_never_closed": ("\\boxed{" + OVERLONG_SUM, "5", "box_too_long"),
    "overlong_box_around_a_box": ("\\boxed{" + "1+" * 2100 + "\\boxed{5}}", "5", "box_too_long"),
    "overlong_box_then_a_phrase": (OVERLONG_BOX + " so the answer is 5", "5", "box_too_long"),
    "overlong_token_box": ("\\boxed " + OVERLONG_SUM, "5", "box_too_long"),
    # responses longer than MAX_TEXT_CHARS whose last box began before the part that is read
    "box_opened_before_the_read_tail": ("\\boxed{" + "1+" * 150_000 + "5}", "5", "no_answer"),
    "box_command_cut_by_the_read_tail": (CUT_COMMAND, "5", "no_answer"),
    "token_box_cut_by_the_read_tail": ("\\boxed " + "1+" * 150_000 + "5", "5", "no_answer"),
    # responses that are not text
    "response_list_5000_deep": (nested(5000, "5"), "5", "no_answer"),
    "response_int_10_pow_10000": (10**10000, "5", "no_answer"),
    "response_unprintable": (Unprintable(), "5", "no_answer"),
    # ground truths of any type, size and depth (a NaN accepted \\boxed{nan}; 60,000 answers took 36 s)
    "gold_int_10_pow_10000": ("\\boxed{5}", 10**10000, "bad_ground_truth"),
    "gold_5000_digits": ("\\boxed{5}", "5" * 5000, "bad_ground_truth"),
    "gold_list_5000_deep": ("\\boxed{5}", nested(5000, "5"), "bad_ground_truth"),
    "gold_lists_64x64": ("\\boxed{5}", [[str(i) for i in range(64)]] * 64, "bad_ground_truth"),
    "gold_lists_512x64": ("\\boxed{5}", [[str(i) for i in range(64)]] * 512, "bad_ground_truth"),
    "gold_list_65": ("\\boxed{5}", [str(i) for i in range(MAX_ANSWERS + 1)], "bad_ground_truth"),
    "gold_list_60000": ("\\boxed{5}", [str(i) for i in range(60_000)], "bad_ground_truth"),
    "gold_list_strings_64x64": ("\\boxed{5}", [repr([str(i) for i in range(64)])] * 64, "bad_ground_truth"),
    "gold_numpy_1e6": ("\\boxed{5}", np.arange(10**6), "bad_ground_truth"),
    "gold_numpy_64x64": ("\\boxed{5}", np.full((64, 64), 5), "bad_ground_truth"),
    "gold_nan": ("\\boxed{nan}", math.nan, "bad_ground_truth"),
    "gold_nan_text": ("\\boxed{nan}", "nan", "bad_ground_truth"),
    "gold_NaN_text": ("\\boxed{nan}", "NaN", "bad_ground_truth"),
    "gold_numpy_nan": ("\\boxed{nan}", np.float64("nan"), "bad_ground_truth"),
    "gold_nan_in_a_list": ("\\boxed{5}", ["5", math.nan], "bad_ground_truth"),
    "gold_inf": ("\\boxed{\\infty}", math.inf, "bad_ground_truth"),
    "gold_minus_inf": ("\\boxed{-\\infty}", -math.inf, "bad_ground_truth"),
    "gold_dollars_only": ("\\boxed{5}", "$$", "bad_ground_truth"),
    "gold_percent_only": ("\\boxed{5}", "%", "bad_ground_truth"),
    "gold_bool": ("\\boxed{1}", True, "bad_ground_truth"),
    "gold_dict": ("\\boxed{5}", {"answer": "5"}, "bad_ground_truth"),
    "gold_set": ("\\boxed{5}", {"5"}, "bad_ground_truth"),
    "gold_complex": ("\\boxed{5}", 5 + 0j, "bad_ground_truth"),
    "gold_unprintable": ("\\boxed{5}", Unprintable(), "bad_ground_truth"),
    "gold_nested_past_max_nesting": (
        "\\boxed{5}",
        "(" * (MAX_NESTING + 1) + "5" + ")" * (MAX_NESTING + 1),
        "bad_ground_truth",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_ARGUMENTS))
def test_hostile_grader_argument_gets_a_status_in_time_and_no_credit(grader, name):
    """The issue's grader inputs and more: each returns its status within the time limit, in both
    modes, and scores 0 (no worker task is needed to decide any of them)."""
    response, gold, status = HOSTILE_ARGUMENTS[name]
    for mode in ("lenient", "boxed"):
        t0 = time.perf_counter()
        result = grader.grade(response, gold, mode=mode)
        assert time.perf_counter() - t0 < BOUND_S, (mode, result)
        assert (result["status"], result["acc"], result["score"]) == (status, 0.0, 0.0), (mode, result)


def test_the_issues_2105_box_scores_0_with_status_box_too_long():
    """Hand-checked: the box holds 1+1+...+5 = 2,105 in 4,201 characters, past MAX_BOXED_CHARS;
    the grader used to grade its last number, 5, and credited it against 5."""
    assert sum(map(int, OVERLONG_SUM.split("+"))) == 2105
    assert len(OVERLONG_SUM) == 4201 > MAX_BOXED_CHARS
    for mode in ("lenient", "boxed"):
        result = compute_score(
            "math", f"Adding up: {OVERLONG_BOX}.", "5", mode=mode, timeout_s=TEST_TIMEOUT_S
        )
        assert (result["score"], result["status"], result["pred"]) == (0.0, "box_too_long", "")


def test_a_huge_or_deep_ground_truth_is_refused_before_it_is_read():
    """The answer cap is over every value met, at any depth: 32,768 nested answers took 3.45 s to
    normalize, and a list 5,000 deep raised RecursionError."""
    for name in ("gold_list_60000", "gold_lists_512x64", "gold_list_5000_deep", "gold_numpy_1e6"):
        gold = HOSTILE_ARGUMENTS[name][1]

        def refuse(gold=gold):
            with pytest.raises(ValueError, match="ground truth has more than 64 answers"):
                normalize_ground_truth(gold)

        assert cpu_seconds(refuse) < 0.1, name


BAD_SETTINGS = [
    ({"num_workers": -1}, "num_workers=-1 must be an integer from 1 to 256"),  # hung forever
    ({"num_workers": 0}, "num_workers=0 must be an integer from 1 to 256"),
    ({"num_workers": 10**6}, "num_workers=1000000 must be an integer from 1 to 256"),
    ({"num_workers": 2.5}, "num_workers=2.5 must be an integer"),
    ({"num_workers": "4"}, "num_workers='4' must be an integer"),
    ({"num_workers": True}, "num_workers=True must be an integer"),
    ({"timeout_s": math.nan}, r"timeout_s=nan must be a number of seconds in \(0, 300\]"),
    ({"timeout_s": -1}, r"timeout_s=-1 must be a number of seconds"),
    ({"timeout_s": "soon"}, r"timeout_s='soon' must be a number of seconds"),
    ({"mode": "strict"}, "mode='strict' must be one of lenient, boxed"),
    ({"mode": None}, "mode=None must be one of lenient, boxed"),
]


def _grader_entry(entry: str, response: str, num_workers=2, timeout_s=TEST_TIMEOUT_S, mode="lenient") -> dict:
    """Grade `response` against 5 through one public entry."""
    kw = {"num_workers": num_workers, "timeout_s": timeout_s}
    if entry == "compute_score":
        return compute_score("math", response, "5", mode=mode, **kw)
    if entry == "grade_batch":
        return grade_batch([response], ["5"], mode=mode, **kw)[0]
    if entry == "get_grader":
        return get_grader(**kw).grade(response, "5", mode=mode)
    g = Grader(**kw)
    try:
        return g.grade(response, "5", mode=mode)
    finally:
        g.close()


@pytest.mark.parametrize("entry", ["compute_score", "grade_batch", "get_grader", "Grader"])
def test_a_bad_grader_setting_is_one_value_error_naming_it_before_any_grading(entry):
    """A setting is the programmer's or the config's (checked before Ray starts), not the sample's:
    a ValueError naming it and its range, at once; never a hang (num_workers=-1 left the pool with
    no worker) nor a pool of a million processes."""
    assert _grader_entry(entry, "\\boxed{5}")["acc"] == 1.0  # good settings (decided without a worker)
    for settings, message in BAD_SETTINGS:
        outcome: dict = {}

        def call(settings=settings, outcome=outcome):
            try:
                outcome["result"] = _grader_entry(entry, "\\boxed{\\sqrt{25}}", **settings)  # needs a worker
            except Exception as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        thread.join(timeout=10)
        assert not thread.is_alive(), f"{entry}({settings}) hangs"
        assert isinstance(outcome.get("error"), ValueError), (settings, outcome)
        assert re.search(message, str(outcome["error"])), (settings, outcome)


BAD_STORED_GROUND_TRUTHS = {
    "nan": "nan",
    "minus_NaN": "-NaN",
    "dollars_only": "$$",
    "percent_only": "\\%",
    "empty_list_literal": "['']",
    "65_answers_list_literal": repr([str(i) for i in range(MAX_ANSWERS + 1)]),
    "5000_digits": "5" * 5000,
    "nested_past_max_nesting": "(" * (MAX_NESTING + 1) + "5" + ")" * (MAX_NESTING + 1),
}


@pytest.mark.parametrize("name", sorted(BAD_STORED_GROUND_TRUTHS))
def test_data_validate_refuses_every_ground_truth_the_grader_refuses(grader, tmp_path, capsys, name):
    """`data validate` passed a "nan" answer, which the grader then scored 0 forever: it now runs
    the grader's own check and names the file, the row and the column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from recipes.tools.data.cli import main
    from recipes.tools.data.schema import ROW_SCHEMA, make_rows

    gold = BAD_STORED_GROUND_TRUTHS[name]
    assert grader.grade("\\boxed{5}", gold)["status"] == "bad_ground_truth"
    with pytest.raises(ValueError) as refused:
        check_ground_truth(gold)
    rows = make_rows([("1+1?", "2"), ("2+3?", gold), ("3+3?", "6")], data_source="t", split="train")
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), path)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}, row 1, column 'reward_model': ground_truth: {refused.value}" in err, err
    assert err.count("\n") == 1  # one line, no traceback


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
    # the issue's bound: time limit x ceil(hanging / workers) + 5 s
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


def test_a_worker_that_dies_inside_a_task_is_retried_once_on_a_fresh_worker(grader, tmp_path):
    """A grading worker killed mid-task (the OOM killer, an operator's kill -9) costs the task one
    retry on a fresh worker; a task that kills every worker it runs on fails after exactly two
    attempts, and the pool refills. The tasks kill their own worker (tests/grader_worker_tasks.py):
    the test needs no knowledge of pebble's bookkeeping of which worker took which task."""
    import pebble
    from grader_worker_tasks import die_in_first_attempt, die_in_task

    _wait_for_workers(grader)
    first = tmp_path / "first"
    pid = grader._schedule(die_in_first_attempt, (str(first),)).result(timeout=30)
    victim = int(first.read_text())
    assert pid != victim  # the retry ran on another worker and returned
    always = tmp_path / "always"
    with pytest.raises(pebble.ProcessExpired):
        grader._schedule(die_in_task, (str(always),)).result(timeout=30)
    attempts = [int(p) for p in always.read_text().split()]
    assert len(attempts) == 2 and len(set(attempts)) == 2, attempts  # one retry, on a fresh worker
    _wait_for_workers(grader)
    assert not set(grader.worker_pids()) & {victim, *attempts}


def test_workers_dying_mid_batch_lose_no_honest_sample(grader, tmp_path):
    """Two tasks that kill their worker, run first, take down both workers twice while 30 honest
    samples (each needs a worker: k+1 is not a plain number) wait behind them: every honest sample
    is still graded right."""
    import pebble
    from grader_worker_tasks import die_in_task

    _wait_for_workers(grader)
    logs = [tmp_path / f"deaths{k}" for k in range(2)]
    deaths = [grader._schedule(die_in_task, (str(log),)) for log in logs]
    honest = [grader.submit(f"\\boxed{{{k}+1}}", str(k + 1)) for k in range(30)]
    assert [f.result(timeout=60)["acc"] for f in honest] == [1.0] * 30
    assert all(isinstance(f.exception(timeout=30), pebble.ProcessExpired) for f in deaths)
    assert sum(len(log.read_text().split()) for log in logs) == 4  # each died, was retried, died
    _wait_for_workers(grader)


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
            from rewards import compute_score

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
from rewards.grade import Grader
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


def test_prepare_drops_a_row_whose_answer_the_grader_refuses():
    """Otherwise one such row of a downloaded dataset would make `data prepare` fail validation
    (dropped rows are counted as `train_unusable`, like rows without an answer)."""
    from recipes.tools.data.sources import map_problem_answer

    assert map_problem_answer({"problem": "2+3?", "answer": "5"}) == ("2+3?", "5")
    for gold in ("nan", "$$", "5" * 5000):
        assert map_problem_answer({"problem": "2+3?", "answer": gold}) is None, gold
