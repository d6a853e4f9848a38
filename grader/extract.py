"""Answer extraction from a model response, and ground-truth normalization.

Pure string work, linear in the input (and capped at its last MAX_TEXT_CHARS characters), safe on
hostile text: it runs in the caller's process (no math-verify, no sympy, nothing evaluated). The
equivalence check that can hang lives in `grader._mathverify` and runs only in the grading pool's
killable worker processes.

Extraction order (docs/methods.md#rewards-and-answer-extraction; the prompt-augmentation authors'
rule, extended):
  1. cut the response at the first stop string (`</answer>`, `<|im_end|>`, `<|endoftext|>`, `</s>`);
  2. the last well-formed `\\boxed{...}` / `\\fbox{...}` (brace-matched) or `\\boxed 5`;
  3. the text after the last "final answer is" / "the answer is";
  4. the last number.
Mode `lenient` uses all four (training); mode `boxed` uses only 1-2 (evaluation, as the papers'
evaluation did).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

Mode = Literal["lenient", "boxed"]
MODES: tuple[str, ...] = ("lenient", "boxed")

STOP_STRINGS: tuple[str, ...] = ("</answer>", "<|im_end|>", "<|endoftext|>", "</s>")

# A boxed answer longer than this is treated as unterminated: real answers (matrices included)
# are far shorter.
MAX_BOXED_CHARS = 4096
# Extraction looks at the last MAX_TEXT_CHARS characters of a response (after the stop string):
# the answer is at the end, and far more text than any preset's response length is a model
# gone wrong, not an answer.
MAX_TEXT_CHARS = 200_000
# A ground truth string longer than this is never `ast.literal_eval`-ed as a Python list.
_MAX_LIST_LITERAL_CHARS = 20_000
# A ground truth with more accepted answers than this is not a ground truth (a column mixed up):
# it is refused before it is read, so its size cannot cost time outside the grader's limit.
MAX_ANSWERS = 64
# Bracket nesting ({, (, [) past which math-verify's verdicts are wrong, not slow: 106 levels of
# \frac{1}{...} around 2 are graded equal to 1/2 (102 levels are right). Past this depth the grader
# says it cannot tell (status too_deep) instead of answering; no real answer nests this deep.
MAX_NESTING = 50
_NAN_STRINGS = frozenset({"nan", "-nan", "+nan"})

_BOX_RE = re.compile(r"\\(?:boxed|fbox)")
_BRACE_RE = re.compile(r"\\[{}]|[{}]")  # escaped braces (`\{`) do not group in LaTeX
_PHRASE_RE = re.compile(r"(?:final answer|the answer) is", re.IGNORECASE)
_NUMBER_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_INLINE_MATH_RE = re.compile(r"\$\$?(.+?)\$\$?", re.DOTALL)
_PERCENT_RE = re.compile(r"\\?%")
# Plain numbers: integers, decimals, a/b and \frac{a}{b}, optionally in degrees. Bounded digit
# counts, no exponents: turning one into a Fraction is always cheap.
_DEC = r"-?(?:\d{1,40}(?:\.\d{1,40})?|\.\d{1,40})"
_NUMERIC_RE = re.compile(
    rf"(?P<dec>{_DEC})|(?P<sign>-?)(?:\\[dt]?frac\{{(?P<fn>-?\d{{1,40}})\}}\{{(?P<fd>-?\d{{1,40}})\}}|(?P<sn>\d{{1,40}})/(?P<sd>\d{{1,40}}))"
)
_DEGREES_RE = re.compile(r"\^\s*(?:\{\s*\\circ\s*\}|\\circ)$")


@dataclass(frozen=True)
class Extraction:
    """The extracted answer (None when nothing could be extracted) and the rule that found it."""

    answer: str | None
    method: Literal["boxed", "phrase", "last_number"] | None


def to_text(value: Any) -> str:
    """Any response value as a clean `str`: None -> "", bytes decoded with replacement,
    lone surrogates replaced (they cannot be encoded, logged or sent to a tokenizer)."""
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    text = value if isinstance(value, str) else str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", errors="replace").decode("utf-8")
    return text


def cut_at_stop(text: str, stop_strings: Iterable[str] = STOP_STRINGS) -> str:
    """The text before the first occurrence of any stop string."""
    cut = len(text)
    for stop in stop_strings:
        i = text.find(stop, 0, cut)
        if i != -1:
            cut = i
    return text[:cut]


def _closing_braces(text: str) -> dict[int, int]:
    """For every `{` in `text` that is closed, the index of its `}`: one pass with a stack."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_RE.finditer(text):
        tok = m.group()
        if tok == "{":
            stack.append(m.start())
        elif tok == "}" and stack:
            closing[stack.pop()] = m.start()
    return closing


def last_boxed(text: str) -> str | None:
    """Content of the last well-formed `\\boxed{}` / `\\fbox{}` / `\\boxed x` in `text`.

    Linear in the text: braces are matched in one pass, then the boxes are tried from the last
    one back. A box whose content is longer than MAX_BOXED_CHARS counts as unterminated."""
    text = text[-MAX_TEXT_CHARS:]
    closing: dict[int, int] | None = None
    for m in reversed(list(_BOX_RE.finditer(text))):
        i = m.end()
        if i < len(text) and text[i].isalpha():  # `\boxedx`: another command, not a box
            continue
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            if closing is None:
                closing = _closing_braces(text)
            close = closing.get(i)
            content = None if close is None or close - i > MAX_BOXED_CHARS else text[i + 1 : close]
        elif i > m.end():  # `\boxed 5`: one token, up to whitespace or `$`
            token = re.match(r"[^\s$]+", text[i : i + MAX_BOXED_CHARS])
            content = token.group() if token else None
        else:
            content = None
        if content is not None and content.strip():
            return content.strip()
    return None


def _after_phrase(text: str) -> str | None:
    last = None
    for last in _PHRASE_RE.finditer(text):  # noqa: B007 - we want the last match
        pass
    if last is None:
        return None
    rest = text[last.end() :].lstrip(" :\t")
    line = rest.split("\n", 1)[0]
    math = _INLINE_MATH_RE.search(line)
    if math:
        line = math.group(1)
    line = line.strip().rstrip(".").strip()
    return line or None


def _last_number(text: str) -> str | None:
    tail_start = max(0, len(text) - 2048)
    found = None
    for found in _NUMBER_RE.finditer(text, tail_start):  # noqa: B007
        pass
    if found is None or (tail_start and found.start() == tail_start):
        for found in _NUMBER_RE.finditer(text):  # noqa: B007
            pass
    return None if found is None else found.group().replace(",", "")


def extract_answer(response: Any, mode: Mode = "lenient") -> Extraction:
    """Extract the final answer of `response` by the rules in the module docstring."""
    if mode not in MODES:
        raise ValueError(f"unknown extraction mode {mode!r}; expected one of {MODES}")
    text = cut_at_stop(to_text(response))[-MAX_TEXT_CHARS:]
    boxed = last_boxed(text)
    if boxed is not None:
        return Extraction(boxed, "boxed")
    if mode == "boxed":
        return Extraction(None, None)
    phrase = _after_phrase(text)
    if phrase is not None:
        return Extraction(phrase, "phrase")
    number = _last_number(text)
    if number is not None:
        return Extraction(number, "last_number")
    return Extraction(None, None)


def clean_answer(answer: str) -> str:
    """Normalize an answer string before math-verify sees it: strip whitespace, surrounding `$`,
    and percent signs (MATH writes `50\\%` where a model writes `50`; math-verify keeps them apart)."""
    answer = answer.strip()
    if len(answer) >= 2 and answer.startswith("$") and answer.endswith("$"):
        answer = answer.strip("$").strip()
    return _PERCENT_RE.sub("", answer).strip()


def numeric_value(answer: str) -> Fraction | None:
    """The exact value of a plain-number answer (`12`, `-0.75`, `3/4`, `\\frac{3}{4}`, `30^\\circ`),
    or None for anything else. Two plain numbers are equivalent exactly when their values are
    equal; math-verify agrees on every such pair (tests/test_equivalence.py checks it on random
    ones), so the grader decides them without a worker task."""
    text = _DEGREES_RE.sub("", answer.replace(" ", ""))
    m = _NUMERIC_RE.fullmatch(text)
    if m is None:
        return None
    if m["dec"] is not None:
        return Fraction(m["dec"])
    num, den = (m["fn"], m["fd"]) if m["fn"] is not None else (m["sn"], m["sd"])
    if int(den) == 0:
        return None
    value = Fraction(int(num), int(den))
    return -value if m["sign"] else value


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting of `text` ({, ( and [; escaped \\{ included)."""
    depth = deepest = 0
    for ch in text:
        if ch in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "})]" and depth:
            depth -= 1
    return deepest


def normalize_ground_truth(ground_truth: Any) -> tuple[str, ...]:
    """All accepted answers of a ground truth, cleaned; an empty tuple if there are none.

    Accepts a string, a number (`142.0` -> "142"), a list / tuple / numpy array of those
    (several answers: any one is correct), and a Python-list *string* of strings as Minerva and
    OlympiadBench store them (`"['9.6\\n']"`). A bracketed string that is not a list of strings
    (`"[0, 1]"`, an interval) stays one answer. A NaN or infinite number is no answer (ValueError),
    and neither is a list of more than MAX_ANSWERS answers.
    """
    if ground_truth is None:
        return ()
    if isinstance(ground_truth, bytes | bytearray):
        ground_truth = to_text(ground_truth)
    if isinstance(ground_truth, bool):
        raise TypeError(f"ground truth {ground_truth!r} is a bool, not an answer")
    if isinstance(ground_truth, int | float):
        if isinstance(ground_truth, float) and not math.isfinite(ground_truth):
            raise ValueError(f"ground truth {ground_truth!r} is not a finite number")
        if isinstance(ground_truth, float) and ground_truth.is_integer():
            ground_truth = int(ground_truth)
        return (str(ground_truth),)
    if hasattr(ground_truth, "tolist") and not isinstance(ground_truth, str):  # numpy array/scalar
        ground_truth = ground_truth.tolist()
    if isinstance(ground_truth, list | tuple):
        if len(ground_truth) > MAX_ANSWERS:
            raise ValueError(f"ground truth has {len(ground_truth)} answers, more than {MAX_ANSWERS}")
        out: list[str] = []
        for item in ground_truth:
            out.extend(a for a in normalize_ground_truth(item) if a not in out)
        return tuple(out)
    text = to_text(ground_truth).strip()
    if text.startswith("[") and text.endswith("]") and len(text) <= _MAX_LIST_LITERAL_CHARS:
        try:
            value = ast.literal_eval(text)  # literals only: never executes code
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            value = None
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return normalize_ground_truth(value)
    cleaned = clean_answer(text)
    if cleaned.lower() in _NAN_STRINGS:  # a NaN written out (pandas, NumPy): no answer is NaN
        raise ValueError(f"ground truth {text!r} is not a number")
    return (cleaned,) if cleaned else ()
