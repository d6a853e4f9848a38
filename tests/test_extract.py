"""Answer extraction and ground-truth normalization (rewards.extract): each rule on its own."""

import pytest

from rewards.extract import (
    MAX_BOXED_CHARS,
    Extraction,
    check_ground_truth,
    clean_answer,
    cut_at_stop,
    extract_answer,
    last_boxed,
    normalize_ground_truth,
    to_text,
)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("a</answer>b<|im_end|>c", "a"),
        ("a<|im_end|>b</answer>", "a"),
        ("x<|endoftext|>y", "x"),
        ("x</s>y", "x"),
        ("no stop here", "no stop here"),
    ],
)
def test_cut_at_first_stop_string(text, expected):
    assert cut_at_stop(text) == expected


def test_boxed_after_stop_string_is_ignored():
    text = "<answer>\\boxed{4}</answer> then a second try \\boxed{5}"
    assert extract_answer(text).answer == "4"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("so \\boxed{5}.", "5"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\text{(C)}}", "\\text{(C)}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
        ("\\boxed {7}", "7"),
        ("the result is $\\boxed 5$.", "5"),
        ("\\fbox{12}", "12"),
        ("\\boxed{3} and then a broken \\boxed{4", "3"),  # unterminated last box: previous one
        ("\\boxed{}", None),  # empty box is not an answer
        ("\\boxedx{3}", None),  # another command
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize("mode", ["lenient", "boxed"])
def test_a_box_longer_than_the_bound_is_no_answer_in_either_mode(mode):
    """Up to MAX_BOXED_CHARS a box is read whole; one character more and the last box is no answer:
    not its last number (lenient read 5 in a box worth 2,105), not an earlier box."""
    fits = "9" * (MAX_BOXED_CHARS - 1) + "5"
    assert extract_answer(f"\\boxed{{{fits}}}", mode) == Extraction(fits, "boxed")
    for text in (f"\\boxed{{9{fits}}}", f"\\boxed{{5}} then \\boxed{{9{fits}}}", f"\\boxed 9{fits}"):
        assert extract_answer(text, mode) == Extraction(None, "box_too_long"), text[:20]
        assert last_boxed(text) is None
    # a box left open near the end (a response cut off) still gives way to the one before
    assert extract_answer("\\boxed{3} and then \\boxed{4", mode) == Extraction("3", "boxed")
    assert (
        extract_answer("\\boxed{3} and then \\boxed{4" + "+1" * MAX_BOXED_CHARS, mode).method
        == "box_too_long"
    )


@pytest.mark.parametrize(
    "text,answer,method",
    [
        ("blah \\boxed{9} the answer is 8", "9", "boxed"),
        ("We get it. The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}", "phrase"),
        ("so the answer is 42.\nMore text 7", "42", "phrase"),
        ("The Final Answer Is: 6", "6", "phrase"),
        ("the answer is 1. Wait, no: the answer is 2", "2", "phrase"),
        ("we add 3 and 4 to get 7.", "7", "last_number"),
        ("it costs 1,234.5 dollars", "1234.5", "last_number"),
        ("ratio -3/4 it is", "-3/4", "last_number"),
        ("no digits at all", None, None),
    ],
)
def test_lenient_fallbacks_in_order(text, answer, method):
    got = extract_answer(text, "lenient")
    assert (got.answer, got.method) == (answer, method)


@pytest.mark.parametrize("text", ["The final answer is 5", "we get 7", "\\boxed{"])
def test_boxed_mode_ignores_fallbacks(text):
    assert extract_answer(text, "boxed").answer is None


def test_boxed_mode_reads_box():
    assert extract_answer("x \\boxed{7} y", "boxed").answer == "7"


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="unknown extraction mode"):
        extract_answer("x", "strict")


def test_last_number_across_the_tail_window():
    text = "9" * 5000  # one number longer than the tail window: the whole number, not its tail
    assert extract_answer(text).answer == text


@pytest.mark.parametrize(
    "raw,expected",
    [
        (None, ""),
        (b"\\boxed{1}\xff", "\\boxed{1}\ufffd"),
        ("a\ud800b", "a?b"),
        (12, "12"),
    ],
)
def test_to_text(raw, expected):
    assert to_text(raw) == expected


@pytest.mark.parametrize(
    "raw,expected",
    [
        (" $50\\%$ ", "50"),
        ("12%", "12"),
        ("$x$", "x"),
        ("\\frac{1}{2}", "\\frac{1}{2}"),
    ],
)
def test_clean_answer(raw, expected):
    assert clean_answer(raw) == expected


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("42", ("42",)),
        (142.0, ("142",)),
        (2.5, ("2.5",)),
        ("['9.6\\n']", ("9.6",)),  # Minerva / OlympiadBench: a Python-list string
        (["$2^{1009}$"], ("2^{1009}",)),
        ("['1', '2']", ("1", "2")),  # several answers
        (["3", "3"], ("3",)),
        ("[0, 1]", ("[0, 1]",)),  # an interval, not a list of answers
        ("[1,2)", ("[1,2)",)),
        ("['unclosed'", ("['unclosed'",)),
        ("", ()),
        ("   ", ()),
        (None, ()),
        ([], ()),
        ("['']", ()),
    ],
)
def test_normalize_ground_truth(raw, expected):
    assert normalize_ground_truth(raw) == expected


def test_normalize_ground_truth_numpy_array():
    import numpy as np

    assert normalize_ground_truth(np.array(["7", "8"])) == ("7", "8")
    assert normalize_ground_truth(np.array([[7], [8]])) == ("7", "8")


def test_nested_ground_truths_flatten_in_order_and_count_every_value():
    assert normalize_ground_truth([["1", ["2", "['3', '1']"]], 4.0]) == ("1", "2", "3", "4")
    assert len(normalize_ground_truth([str(i) for i in range(64)])) == 64
    with pytest.raises(ValueError, match="more than 64 answers"):  # 63 answers and 2 lists
        normalize_ground_truth([[str(i) for i in range(32)], [str(i) for i in range(31)]])


@pytest.mark.parametrize(
    "gold,problem",
    [
        ("", "ground truth is empty: it holds no answer"),
        (10**5000, "ground truth is an integer of 16,610 bits, longer than 4,096 digits"),
        ("7" * 4097, "'... (4,097 characters) is longer than 4,096 characters"),
        ("(" * 51 + "1" + ")" * 51, "nests brackets deeper than 50"),
        (object(), "ground truth of type object is not an answer"),
    ],
    ids=["empty", "int_5000_digits", "text_4097_chars", "nested_51", "object"],
)
def test_check_ground_truth_says_why_a_ground_truth_is_no_answer(gold, problem):
    with pytest.raises(ValueError) as refused:
        check_ground_truth(gold)
    assert problem in str(refused.value), refused.value


def test_ground_truth_literal_is_never_executed(tmp_path):
    target = tmp_path / "pwned"
    raw = f"[__import__('os').system('touch {target}')]"
    assert normalize_ground_truth(raw) == (raw,)
    assert not target.exists()
