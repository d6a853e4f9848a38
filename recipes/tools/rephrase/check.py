"""The text rules a candidate rephrasing must pass, each a rejection reason, and the fill rule for
a question left with fewer than N (docs/rephrase.md#validation-rules)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

REASONS = (
    "empty",
    "copy",
    "states_answer",
    "missing_number",
    "changed_sign",
    "changed_operator",
    "missing_math",
    "length",
)
"""Rejection reasons of `check_rephrasing`, in the order the rules are checked."""
WRONG_ANSWER = "wrong_answer"
"""Rejected by verification: the endpoint's majority answer to the rephrasing is not the ground truth."""
UNPARSED = "unparsed"
"""Asked for but not delivered: the answer had fewer `<rephrasing>` blocks than asked."""

MIN_LENGTH_RATIO, MAX_LENGTH_RATIO, MAX_CHARS = 0.5, 3.0, 4000


_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+")
_WS = re.compile(r"\s+")


def _norm_text(s: str) -> str:
    return _WS.sub(" ", s.lower()).strip()


def _canonical_number(s: str) -> str:
    s = s.replace(",", "")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    s = s.lstrip("0")
    return "0" + s if s.startswith(".") or not s else s


def numbers(text: str) -> Counter:
    """The multiset of numbers of `text`, canonical strings (thousands separators, trailing and
    leading zeros normalized)."""
    text = text.replace("{,}", ",").replace(",\\!", ",")
    return Counter(_canonical_number(m.group()) for m in _NUMBER.finditer(text))


# a statement of the answer or a hint; not a problem's own "express your answer as ..."
_STATES = re.compile(r"\\boxed|\bhint\b|\b(?:answer|solution|result)\s*(?:is|=|:)", re.IGNORECASE)
# a minus sign written onto a number: "-6", "(-2)", "$-3$", "= -1"; not the binary minus of "6 - 2"
_SIGNED = re.compile(r"(?:^|(?<=[\s(\[{,=:;$]))[-−](?=\.?\d)")


def signed_numbers(text: str) -> int:
    """How many numbers of `text` carry a minus sign of their own."""
    return len(_SIGNED.findall(text))


_OPERATOR = re.compile(r"(?<=[\d)])\s*([-+*/^×÷−])\s*(?=[\d(])")
_SAME_OPERATOR = str.maketrans({"×": "*", "÷": "/", "−": "-"})


def operators(text: str) -> Counter:
    """The multiset of arithmetic operators written between two operands (`6 - 2`, `3*(4+1)`,
    `2^5`); `×`, `÷` and the minus sign `−` count as `*`, `/` and `-`."""
    return Counter(m.group(1).translate(_SAME_OPERATOR) for m in _OPERATOR.finditer(text))


def _find_unescaped(text: str, needle: str, start: int) -> int:
    while True:
        j = text.find(needle, start)
        if j <= 0 or text[j - 1] != "\\":
            return j
        start = j + 1


def math_spans(text: str) -> list[str]:
    """The contents of the LaTeX math spans of `text` (`$...$`, `$$...$$`, `\\(...\\)`,
    `\\[...\\]`), whitespace removed, empty ones dropped. `\\$` is not a delimiter; an unclosed
    delimiter opens no span. Linear time apart from one search per delimiter kind."""
    spans: list[str] = []
    exhausted: set[str] = set()  # closers that no longer occur: stop searching for them
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 < n and text[i + 1] in "([":
                opener = text[i : i + 2]
                closer = "\\)" if opener == "\\(" else "\\]"
                j = -1 if closer in exhausted else text.find(closer, i + 2)
                if j >= 0:
                    spans.append(text[i + 2 : j])
                    i = j + 2
                    continue
                exhausted.add(closer)
            i += 2  # an escaped character (\$, \\) or an unclosed \( \[
            continue
        if c == "$":
            delim = "$$" if text.startswith("$$", i) else "$"
            j = -1 if delim in exhausted else _find_unescaped(text, delim, i + len(delim))
            if j >= 0:
                spans.append(text[i + len(delim) : j])
                i = j + len(delim)
                continue
            exhausted.add(delim)
            i += len(delim)
            continue
        i += 1
    return [s for s in (_WS.sub("", s) for s in spans) if s]


_DELIMS = re.compile(r"\$|\\[()\[\]]")  # $, \( \) \[ \]
_SPACING = re.compile(r"\\left|\\right|\\[,!;: ]")
_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")


def _norm_math(s: str) -> str:
    """A math expression without whitespace, spacing commands, \\left/\\right and braces, with
    simple fractions written a/b: `\\frac{1}{3}` and `1/3`, `x^{2}` and `x^2` compare equal."""
    s = _SPACING.sub("", _WS.sub("", s))
    while True:
        t = _FRAC.sub(
            lambda m: f"{m[1]}/{m[2]}" if m[1].isalnum() and m[2].isalnum() else f"({m[1]})/({m[2]})", s
        )
        if t == s:
            break
        s = t
    return s.replace("{", "").replace("}", "")


def check_rephrasing(original: str, candidate: Any, accepted: Iterable[str] = ()) -> str | None:
    """None if `candidate` is a valid rephrasing of `original` given the rephrasings already
    `accepted`, else the first broken rule's name (one of REASONS; docs/rephrase.md#validation-rules)."""
    cand = candidate.strip() if isinstance(candidate, str) else ""
    if not cand:
        return "empty"
    orig = original.strip()
    norm = _norm_text(cand)
    if norm == _norm_text(orig) or any(norm == _norm_text(a) for a in accepted):
        return "copy"
    if _STATES.search(cand) and not _STATES.search(orig):
        return "states_answer"
    if numbers(orig) - numbers(cand):
        return "missing_number"
    if signed_numbers(cand) != signed_numbers(orig):
        return "changed_sign"
    if operators(orig) - operators(cand):
        return "changed_operator"
    text = _norm_math(_DELIMS.sub("", cand))
    if any(_norm_math(span) not in text for span in math_spans(orig)):
        return "missing_math"
    if len(cand) > MAX_CHARS or not MIN_LENGTH_RATIO * len(orig) <= len(cand) <= MAX_LENGTH_RATIO * len(orig):
        return "length"
    return None


def fill(original: str, accepted: Sequence[str], n: int) -> list[str]:
    """Exactly `n` rephrasings: the accepted ones, cycled when fewer than `n`; with none accepted,
    the original question `n` times."""
    pool = list(accepted) or [original]
    return [pool[i % len(pool)] for i in range(n)]
