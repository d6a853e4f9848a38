"""Answer extraction from a model response, and ground-truth normalization.

Pure string work, linear in the input (and capped at its last MAX_TEXT_CHARS characters), safe on
hostile text: it runs in the caller's process (no math-verify, no sympy, nothing evaluated). The
equivalence check that can hang lives in `rewards._mathverify` and runs only in the grading pool's
killable worker processes.

Extraction order (docs/methods.md#rewards-and-answer-extraction; the prompt-augmentation authors'
rule, extended):
  1. cut the response at the first stop string (`</answer>`, `<|im_end|>`, `<|endoftext|>`, `</s>`);
  2. the last well-formed `\\boxed{...}` / `\\fbox{...}` (brace-matched) or `\\boxed 5`;
  3. the text after the last "final answer is" / "the answer is";
  4. the last number.
Mode `lenient` uses all four (training); mode `boxed` uses only 1-2 (evaluation, as the papers'
evaluation did). In both modes a last box longer than MAX_BOXED_CHARS is no answer (method
`box_too_long`): neither an earlier box nor a fallback, which would read its tail, stands in for it.
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

# The longest answer the grader reads: real answers (matrices included) are far shorter. A last
# box longer than this is no answer (its tail is not an answer either), and a ground truth answer
# longer than this is refused (no response could be read as it; `10**10000` is such a one).
MAX_BOXED_CHARS = 4096
# Extraction looks at the last MAX_TEXT_CHARS characters of a response (after the stop string):
# the answer is at the end, and far more text than any preset's response length is a model
# gone wrong, not an answer.
MAX_TEXT_CHARS = 200_000
# A ground truth string longer than this is never `ast.literal_eval`-ed as a Python list.
_MAX_LIST_LITERAL_CHARS = 20_000
# A ground truth holding more values than this (answers, and lists of them, at any depth and in
# Python-list strings too) is not a ground truth (a column mixed up): it is refused at the first
# value past the cap, before any is normalized, so its size or depth cannot cost time outside the
# grader's limit.
MAX_ANSWERS = 64
_MAX_INT = 10**MAX_BOXED_CHARS  # the first int with more digits than an answer may have
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
# Python's notation in published answers (Minerva): `4.5e33`, `-1./3`, `np.arcsin(...)`.
_E_NUMBER_RE = re.compile(r"([-+]?\d{1,40}(?:\.\d{1,40})?)[eE]([-+]?\d{1,6})")
_PY_FRACTION_RE = re.compile(r"([-+]?\d{1,40})\.?/(\d{1,40})\.?")
_NUMPY_RE = re.compile(r"\bnp\.(arcsin|arccos|arctan|sinh|cosh|tanh|sin|cos|tan|exp|log|sqrt|pi)\b")
# Plain numbers: integers, decimals, a/b and \frac{a}{b}, optionally in degrees. Bounded digit
# counts, no exponents: turning one into a Fraction is always cheap.
_DEC = r"-?(?:\d{1,40}(?:\.\d{1,40})?|\.\d{1,40})"
_NUMERIC_RE = re.compile(
    rf"(?P<dec>{_DEC})|(?P<sign>-?)(?:\\[dt]?frac\{{(?P<fn>-?\d{{1,40}})\}}\{{(?P<fd>-?\d{{1,40}})\}}|(?P<sn>\d{{1,40}})/(?P<sd>\d{{1,40}}))"
)
_DEGREES_RE = re.compile(r"\^\s*(?:\{\s*\\circ\s*\}|\\circ)$")


@dataclass(frozen=True)
class Extraction:
    """The extracted answer (None when nothing could be extracted) and the rule that found it;
    method `box_too_long` (answer None): the last box is longer than MAX_BOXED_CHARS."""

    answer: str | None
    method: Literal["boxed", "phrase", "last_number", "box_too_long"] | None


def to_text(value: Any) -> str:
    """Any response value as a clean `str`: None -> "", bytes decoded with replacement,
    lone surrogates replaced (they cannot be encoded, logged or sent to a tokenizer)."""
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # any object's __str__ (a list nested too deep for it, ...): no text
        return ""
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


def _after_unseen_groups(text: str) -> int:
    """The index after the last `}` of `text` that closes a group opened before it (0 if none):
    in a response cut to its tail, what comes before may be the inside of a box whose opening
    was cut off."""
    depth = after = 0
    for m in _BRACE_RE.finditer(text):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            if depth:
                depth -= 1
            else:
                after = m.end()
    return after


def readable_tail(text: str) -> tuple[str, bool]:
    """The part of a response extraction reads, and whether it is all of it. A response longer
    than MAX_TEXT_CHARS is read from its last MAX_TEXT_CHARS characters, from after any brace
    closing a group opened before them (it may close a box whose start was cut off)."""
    if len(text) <= MAX_TEXT_CHARS:
        return text, True
    text = text[-MAX_TEXT_CHARS:]
    return text[_after_unseen_groups(text) :], False


def _box_start(text: str, m: re.Match) -> tuple[int, bool] | None:
    """Where the content of the box command `m` starts, and whether it is braced (`\\boxed{5}`,
    the index of its `{`) or one token (`\\boxed 5`); None when `m` is not a box (`\\boxedx`)."""
    i = m.end()
    if i < len(text) and text[i].isalpha():  # `\boxedx`: another command, not a box
        return None
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == "{":
        return i, True
    return (i, False) if i > m.end() else None


def _too_long(text: str, brace: int, close: int | None) -> bool:
    """Whether the braced box opening at `brace` (closing at `close`, None if never) holds more
    than MAX_BOXED_CHARS characters."""
    return (len(text) if close is None else close) - brace - 1 > MAX_BOXED_CHARS


def boxed_answer(text: str) -> tuple[str | None, bool]:
    """The content of the last well-formed `\\boxed{}` / `\\fbox{}` / `\\boxed x` in `text`, and
    whether the last box is too long to read (content None then).

    A box whose content is longer than MAX_BOXED_CHARS (closed after that many characters, or
    never closed with more than that many after its opening) cannot be read: when it is the last
    box, or encloses the last box, there is no answer. A box left open near the end of the text (a
    response cut off) is skipped for the one before, and so is an empty box. Linear in the text:
    braces are matched in one pass, then the boxes are tried from the last one back."""
    text, _ = readable_tail(text)
    boxes = [start for m in _BOX_RE.finditer(text) if (start := _box_start(text, m)) is not None]
    closing: dict[int, int] | None = None
    for k in range(len(boxes) - 1, -1, -1):
        i, braced = boxes[k]
        if not braced:  # one token, up to whitespace or `$`
            token = re.match(r"[^\s$]+", text[i : i + MAX_BOXED_CHARS + 1])
            if token and len(token.group()) > MAX_BOXED_CHARS:
                return None, True
            content = token.group() if token else ""
        else:
            if closing is None:
                closing = _closing_braces(text)
            close = closing.get(i)
            if _too_long(text, i, close):
                return None, True
            if close is None:
                continue
            content = text[i + 1 : close]
        if content.strip():
            if braced:  # a box around this one ends after it: that one is the last answer
                for j, outer_braced in boxes[:k]:
                    outer = closing.get(j) if outer_braced else None
                    if outer is not None and outer > close and _too_long(text, j, outer):
                        return None, True
            return content.strip(), False
    return None, False


def last_boxed(text: str) -> str | None:
    """Content of the last well-formed box in `text`, None if there is none or it is too long to
    read (`boxed_answer`)."""
    return boxed_answer(text)[0]


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
    text, whole = readable_tail(cut_at_stop(to_text(response)))
    boxed, too_long = boxed_answer(text)
    if too_long:
        return Extraction(None, "box_too_long")
    if boxed is not None:
        return Extraction(boxed, "boxed")
    if mode == "boxed" or not whole:  # in a cut response, any text may be the tail of a box
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
    and percent signs (MATH writes `50\\%` where a model writes `50`; math-verify keeps them apart),
    and write an answer in Python's notation in LaTeX: Minerva publishes `4.5e33` (math-verify reads
    4.5·e·33, so a right `4.5 \\times 10^{33}` scored 0), `-1./3` and `np.arcsin(10/13)`."""
    answer = answer.strip()
    if len(answer) >= 2 and answer.startswith("$") and answer.endswith("$"):
        answer = answer.strip("$").strip()
    answer = _PERCENT_RE.sub("", answer).strip()
    if m := _E_NUMBER_RE.fullmatch(answer):
        return f"{m[1]}\\times 10^{{{m[2].lstrip('+')}}}"
    if m := _PY_FRACTION_RE.fullmatch(answer):
        return f"{m[1]}/{m[2]}"
    return _NUMPY_RE.sub(r"\\\1", answer)


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


def _shown(text: str) -> str:
    """`text` for a message: its repr, cut to 60 characters."""
    return repr(text) if len(text) <= 60 else repr(text[:60]) + f"... ({len(text):,} characters)"


def _number_text(value: int | float) -> str:
    """A numeric ground truth as text (`142.0` -> "142"); ValueError for NaN, infinity and an
    integer longer than an answer may be (whose str() would raise anyway past 4,300 digits)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"ground truth {value!r} is not a finite number")
        if not value.is_integer():
            return str(value)
        value = int(value)
    if abs(value) >= _MAX_INT:
        raise ValueError(
            f"ground truth is an integer of {value.bit_length():,} bits, longer than "
            f"{MAX_BOXED_CHARS:,} digits (the longest answer the grader reads)"
        )
    return str(value)


def normalize_ground_truth(ground_truth: Any) -> tuple[str, ...]:
    """All accepted answers of a ground truth, cleaned; an empty tuple if there are none.

    Accepts a string, a number (`142.0` -> "142"), a list / tuple / numpy array of those, nested
    or not (several answers: any one is correct), and a Python-list *string* of strings as Minerva
    and OlympiadBench store them (`"['9.6\\n']"`). A bracketed string that is not a list of
    strings (`"[0, 1]"`, an interval) stays one answer. ValueError, naming the problem, for what is
    no answer: a NaN or infinite number, a bool or another type, an answer longer than
    MAX_BOXED_CHARS, and more than MAX_ANSWERS values in all (answers and lists, counted as they
    are met, so that a list of any size or depth is refused after at most MAX_ANSWERS steps).
    """
    answers: list[str] = []
    budget = MAX_ANSWERS  # values still allowed
    todo = [ground_truth]  # a stack, last item first: the answers keep their order

    def spend(n: int) -> None:
        nonlocal budget
        if n > budget:
            raise ValueError(
                f"ground truth has more than {MAX_ANSWERS} answers (nested lists count as answers)"
            )
        budget -= n

    while todo:
        value = todo.pop()
        if value is None:
            continue
        if not isinstance(value, str | bytes | bytearray | list | tuple) and hasattr(value, "tolist"):
            size = getattr(value, "size", 1)  # numpy's element count (torch's is numel())
            size = value.numel() if callable(size) and hasattr(value, "numel") else size
            if isinstance(size, int) and size > budget:  # refused before it is copied
                spend(size)
            try:
                value = value.tolist()
            except Exception as exc:  # numpy's own error for an exotic dtype
                raise ValueError(
                    f"ground truth of type {type(value).__name__} cannot be read: {exc}"
                ) from None
        if isinstance(value, list | tuple):
            spend(len(value))
            todo.extend(reversed(value))
            continue
        if isinstance(value, bool):
            raise ValueError(f"ground truth {value!r} is a bool, not an answer")
        if isinstance(value, int | float):
            text = _number_text(value)
        elif isinstance(value, str | bytes | bytearray):
            text = to_text(value).strip()
            if text.startswith("[") and text.endswith("]") and len(text) <= _MAX_LIST_LITERAL_CHARS:
                try:
                    items = ast.literal_eval(text)  # literals only: never executes code
                except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                    items = None
                if isinstance(items, list) and items and all(isinstance(v, str) for v in items):
                    spend(len(items))
                    todo.extend(reversed(items))
                    continue
        else:
            raise ValueError(
                f"ground truth of type {type(value).__name__} is not an answer "
                "(expected text, a number, or a list of them)"
            )
        cleaned = clean_answer(text)
        if cleaned.lower() in _NAN_STRINGS:  # a NaN written out (pandas, NumPy): no answer is NaN
            raise ValueError(f"ground truth {_shown(text)} is not a number")
        if len(cleaned) > MAX_BOXED_CHARS:
            raise ValueError(
                f"ground truth {_shown(cleaned)} is longer than {MAX_BOXED_CHARS:,} characters "
                "(the longest answer the grader reads)"
            )
        if cleaned and cleaned not in answers:
            answers.append(cleaned)
    return tuple(answers)


def check_ground_truth(ground_truth: Any) -> tuple[str, ...]:
    """The accepted answers of a ground truth the grader can grade against; ValueError saying why
    not otherwise: everything `normalize_ground_truth` refuses, no answer at all, and an answer
    nested past MAX_NESTING. The grader scores such a ground truth's responses 0 with status
    `bad_ground_truth`; `data validate` refuses the row with this same check."""
    answers = normalize_ground_truth(ground_truth)
    if not answers:
        raise ValueError("ground truth is empty: it holds no answer")
    for answer in answers:
        if nesting_depth(answer) > MAX_NESTING:
            raise ValueError(f"ground truth {_shown(answer)} nests brackets deeper than {MAX_NESTING}")
    return answers
