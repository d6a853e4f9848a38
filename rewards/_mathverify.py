"""The part of grading that can hang: math-verify's parse and verify. Runs ONLY in the grading
pool's worker processes (`rewards.grade`), which are killed and replaced when a task exceeds its
time limit. Never call these functions in a trainer process.

math-verify's own timeouts (`signal.alarm`) are switched off: they only work on a main thread,
and a power tower like `9^{9^{9^9}}` hangs inside C code that a signal cannot interrupt anyway.
The pool's kill is the one clock.

Only `LatexExtractionConfig` is used, on the answer wrapped as `\\boxed{...}`: the LaTeX parser
builds sympy objects from a grammar, whereas math-verify's plain-expression path goes through
sympy's `parse_expr`, which calls `eval`. Model output is never evaluated as code.
"""

from __future__ import annotations

import ctypes
import logging
import os
import pickle
import signal
import sys

from math_verify import parse, verify
from math_verify.parser import LatexExtractionConfig

# math-verify warns once per process that we disabled its timeouts: that is deliberate.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_LATEX = (LatexExtractionConfig(),)
_gold_cache: dict[bytes, list] = {}
_GOLD_CACHE_MAX = 1024


def _parse_boxed(answer: str) -> list:
    return parse("\\boxed{" + answer + "}", _LATEX, parsing_timeout=None)


def parse_gold(answers: tuple[str, ...]) -> tuple[bytes, bool]:
    """Parse every accepted answer of one ground truth. Returns the parsed answers pickled (so
    the trainer process only stores and forwards bytes and never builds a sympy object) and
    whether any answer parsed to something at all."""
    parsed = [_parse_boxed(a) for a in answers]
    return pickle.dumps(parsed), any(parsed)


def _load_gold(blob: bytes) -> list:
    parsed = _gold_cache.get(blob)
    if parsed is None:
        if len(_gold_cache) >= _GOLD_CACHE_MAX:
            _gold_cache.clear()
        parsed = _gold_cache[blob] = pickle.loads(blob)
    return parsed


def verify_answer(gold_blob: bytes, answer: str) -> bool:
    """True if `answer` is equivalent to any parsed answer in `gold_blob` (from `parse_gold`)."""
    golds = [g for g in _load_gold(gold_blob) if g]
    if not golds:
        return False
    pred = _parse_boxed(answer)
    if not pred:
        return False
    return any(verify(gold, pred, timeout_seconds=None) for gold in golds)


def worker_init() -> None:
    """The pool's initializer, in each worker: SIGKILL when the parent (the forkserver) exits, so
    that no worker outlives the grading process (rewards._orphan_guard). Linux only."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent or parent == 1:  # the parent died before the request took effect
        os._exit(0)
