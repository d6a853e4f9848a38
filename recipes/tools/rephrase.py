"""Offline question rephrasing for TA-GRPO (Le et al. 2026, arXiv 2601.22478; docs/methods.md#ta-grpo).

TA-GRPO trains on each question together with N meaning-preserving rephrasings made by an LLM.
This tool makes them, once, before training: it asks any OpenAI-compatible chat endpoint for N
rephrasings of every question of a parquet file, checks each one, and writes the same rows with
the `rephrasings` column filled.

Command (from the repository root):

    python -m recipes.tools.rephrase --input IN.parquet --output OUT.parquet --n 3 --base-url URL --model NAME
        [--api-key-env OPENAI_API_KEY] [--concurrency 16] [--max-retries 5] [--timeout-s 120]
        [--max-rounds 3] [--temperature 0.8] [--max-tokens T] [--cache PATH] [--stall-s S]
        [--max-filled 0.5]

Endpoint. `{base_url}/chat/completions` through the `openai` SDK, with `model`, `messages` (one
user message) and `temperature`. Any OpenAI-compatible server works: a local `vllm serve Qwen/Qwen2.5-7B-Instruct`
on one GPU node (`--base-url http://localhost:8000/v1`, no key needed; raise `--concurrency` to
keep it busy, e.g. 64; we have not timed a full dataset), or a hosted API (`--base-url
https://api.openai.com/v1 --model gpt-4-turbo`, as the paper). No GPU is needed on the machine
that runs this tool. The API key is read ONLY from the environment variable named by
`--api-key-env` (default OPENAI_API_KEY; unset: the SDK's placeholder "EMPTY", which a server
without a key ignores) and is sent as `Authorization: Bearer ...`; it is never printed, logged, or
written anywhere (nor is the variable's name echoed unless it looks like a name).

Writes.
- `OUT.parquet`: the input rows, unchanged except `rephrasings` (exactly N strings each), written
  atomically with `recipes.tools.data.write_rows` (ROW_SCHEMA). Its metadata (`recipes.tools.data.read_meta`)
  holds a summary of the run: model, n, instruction version, counts, `filled_rows`. Rephrasings
  already in the input are replaced. Input columns (or `extra_info` fields) outside ROW_SCHEMA
  cannot be written by `write_rows`: they are named in a warning and in the metadata.
- `OUT.parquet.cache.jsonl` (or `--cache PATH`): one JSON line per finished question, appended and
  flushed (and fsynced) as soon as the question is done, keyed by a SHA-256 of (question text,
  model, N, INSTRUCTION_VERSION). A rerun of the same command asks only for the questions that
  are not in it, so an interrupted run (Ctrl-C, a crash, the endpoint going away) loses nothing
  that was finished. Delete the cache (or its lines) to ask again.
- stdout: the summary; stderr: a progress bar, warnings and errors.

Exit status: 0 done; 1 the input is invalid (checked before any request), the run could not
finish, or more than `--max-filled` (default 0.5) of the questions ended without N valid
rephrasings (the answers stay in the cache; `--max-filled 1` writes the output from it); 2 a bad
option; 130 Ctrl-C. The run cannot finish when: nothing answers at `--base-url` (one `GET /models`
before any question, 10 s and one retry: a dead endpoint fails in seconds, a hanging one in about
20 s); a request still fails after its retries; a 4xx other than 408/409/429 (a bad key, an
unknown model) comes back; or no request has been answered for `--stall-s` seconds (default 3 x
`--timeout-s`). The partial cache stays and no output is written unless every question was finished.

Requests. At most `--concurrency` requests in flight (an asyncio semaphore), each with the `openai`
SDK's own timeout (`--timeout-s`) and retries (`--max-retries`: connection errors, timeouts, 408,
409, 429 and 5xx, exponential backoff from 0.5 s to 8 s with jitter, a `Retry-After` of up to
120 s honoured; a longer one is not waited for, and the error says so with the retries actually
made). A 200 whose body is not a chat completion counts as an answer with no rephrasing. The API
key is redacted from every answer before it is cached (an endpoint may echo the request).

The instruction (`INSTRUCTION`, version `INSTRUCTION_VERSION`) follows the paper's Appendix A:
change wording, sentence structure, format and the order in which information is given; keep
every number, quantity, mathematical expression and the exact question asked; no plain renaming
of variables; never solve or hint. It has four worked examples of our own and asks for the k
still-missing rephrasings, each in a `<rephrasing>...</rephrasing>` block (later rounds also list
the rephrasings already accepted, which the new ones must differ from). Bump INSTRUCTION_VERSION
whenever the instruction or `user_message` changes: it is part of the cache key.

Parsing (`parse_rephrasings`): text up to the last `</think>` is dropped (reasoning models); the
blocks are the `<rephrasing>...</rephrasing>` pairs (tags case-insensitive), an unclosed block
(usually a truncated output) is dropped, only the first k blocks of an answer asked for k are
examined, and output beyond 200,000 characters is ignored. It never raises, on any input.

Validation (`check_rephrasing`): each candidate is stripped, then checked in this order; the
first rule it breaks is its rejection reason:
- `empty`: nothing left.
- `copy`: equal to the original question or to a rephrasing already accepted for it, after
  lowercasing and collapsing whitespace.
- `missing_number`: every number of the original (integers and decimals; `1,000`, `1{,}000` and
  `1,\\!000` read as 1000; `2.50` as 2.5, `.5` as 0.5; signs ignored) must occur in the
  rephrasing, counted as a multiset (a number written twice must appear twice). Numbers inside
  LaTeX count. New numbers in the rephrasing are allowed ("five" -> "5").
- `changed_operator`: every arithmetic operator written between two operands in the original
  (`6 - 2`, `3*(4+1)`, `2^5`; `×` `÷` `−` read as `*` `/` `-`) must occur between two operands in
  the rephrasing, counted as a multiset: "What is 6 - 2?" -> "Compute 6 + 2." keeps every number
  and changes the answer. The price: an operator put into words ("subtract 2 from 6") is
  rejected too.
- `missing_math`: every LaTeX math span of the original (`$...$`, `$$...$$`, `\\(...\\)`,
  `\\[...\\]`; `\\$` is a dollar sign, not a delimiter; unclosed delimiters open no span) must
  occur in the rephrasing, inside a math span or not, compared after removing whitespace, math
  delimiters, spacing commands, `\\left`/`\\right` and braces, and writing simple fractions
  as a/b: the paper's own example rewrites `$\\frac{1}{3}$` as "1/3", which passes, while a
  changed or renamed expression (`$x^2$` -> `$y^2$`) does not.
- `length`: the rephrasing is shorter than 0.5x or longer than 3.0x the original (characters,
  stripped), or longer than 4,000 characters.
(`states_answer`, after `copy`: a `\\boxed`, "hint", or "answer/solution/result is|=|:" the
original does not have; `changed_sign`, after `missing_number`: more or fewer numbers carrying
their own minus sign than the original.)

Verification (`--verify K`, default 3; 0 turns it off): a candidate that passes the text rules is
solved K times by the same endpoint (one request, `n=K`, SOLVE_PROMPT, `--verify-max-tokens`) and
kept only when more than K/2 of the solutions are graded equal to the row's ground truth by the
project's grader (lenient rule); otherwise it is rejected as `wrong_answer`. Text rules cannot
see "Compute 6 - 2 + 1." for "What is 6 - 2?"; solving it can. The ground truth, K and
VERIFY_VERSION join the cache key; records keep each verdict (`verified`) and the requests and
tokens verification cost.
A candidate that was asked for but not delivered (fewer blocks than asked, or none) counts as
`unparsed`. Rejected and unparsed ones are asked for again in the next round (only the missing
count), up to `--max-rounds` rounds per question.

Fill rule. A question that still has fewer than N accepted rephrasings after the last round is
reported (count and the first row indices) and filled by cycling through its accepted
rephrasings (accepted [a, b], N=3 -> [a, b, a]); with none accepted, every slot is the original
question. The filled rows (0-based row positions) are listed in the output's metadata
(`filled_rows`). Rows with the same question text share one request and one set of rephrasings.

Summary (stdout and the output's metadata): rows, questions, rephrasings requested / accepted,
acceptance rate, a count per rejection reason, questions and rows filled, HTTP requests and
retries. Totals cover every question of the output (cache lines record each question's own
counts); a last line gives what this run itself asked.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from recipes.tools.data import COLUMNS, ROW_SCHEMA, DataError, read_meta, validate_parquet, write_rows

INSTRUCTION_VERSION = "ta-grpo-rephrase-v1"
"""Part of the cache key: bump it whenever INSTRUCTION or `user_message` changes."""

INSTRUCTION = r"""You rephrase math problems. Given a problem, write rephrasings of it that ask exactly the same question in a different way, as in the examples below.

Rules:
1. Change the wording, the sentence structure, the format (for example one sentence, several short sentences, or a Given/Find layout) and the order in which the information is given. Each rephrasing must differ clearly from the original and from the other rephrasings.
2. Keep every number and quantity exactly as written, in digits when the original uses digits, with the same units.
3. Copy every mathematical expression exactly, including its LaTeX and its $...$ delimiters; do not rewrite, simplify or expand it.
4. Ask exactly the same question: the same unknown, the same conditions, and the same requested form of the answer (for example "as a common fraction" or "in meters").
5. Plain changes such as renaming variables are not rephrasings: "If $g(t) = 3t^2 - 5$, what is $g(g(1))$?" is NOT a rephrasing of "If $f(x) = 3x^2 - 5$, what is the value of $f(f(1))$?".
6. Do not solve the problem, do not give or hint at the answer or a method, and add no information that is not in the original.
7. Write each rephrasing inside <rephrasing></rephrasing> tags and write nothing else.

Example 1
Question: A rectangle has a perimeter of 56 meters, and the ratio of its length to its width is 4:3. What is the length of a diagonal of the rectangle, in meters?
Write 2 rephrasings.
<rephrasing>The length and the width of a rectangle are in the ratio 4:3, and its perimeter is 56 meters. How long, in meters, is one of its diagonals?</rephrasing>
<rephrasing>Given: a rectangle whose perimeter is 56 meters and whose length and width are in the ratio 4:3.
Find: the length of a diagonal of this rectangle, in meters.</rephrasing>

Example 2
Question: If $f(x) = 3x^2 - 5$, what is the value of $f(f(1))$?
Write 2 rephrasings.
<rephrasing>What value does $f(f(1))$ take when $f(x) = 3x^2 - 5$?</rephrasing>
<rephrasing>Let $f(x) = 3x^2 - 5$. Evaluate $f(f(1))$.</rephrasing>

Example 3
Question: How many positive integers $n \le 1000$ make $15n$ a perfect square?
Write 2 rephrasings.
<rephrasing>Among the positive integers $n \le 1000$, count those for which $15n$ is a perfect square.</rephrasing>
<rephrasing>Consider every positive integer $n \le 1000$. For how many of them is the product $15n$ a perfect square?</rephrasing>

Example 4
Question: Maria buys 3 notebooks at \$2.50 each and 2 pens at \$1.25 each. She pays with a \$20 bill. How much change, in dollars, does she receive?
Write 3 rephrasings.
<rephrasing>Paying with a \$20 bill, Maria purchases 3 notebooks that cost \$2.50 apiece and 2 pens that cost \$1.25 apiece. In dollars, how much change does she get back?</rephrasing>
<rephrasing>Notebooks cost \$2.50 each and pens cost \$1.25 each. Maria takes 3 notebooks and 2 pens to the register and hands over a \$20 bill. What is her change, in dollars?</rephrasing>
<rephrasing>How much change, in dollars, does Maria receive if she pays for 3 notebooks priced at \$2.50 each and 2 pens priced at \$1.25 each with a \$20 bill?</rephrasing>"""
"""The fixed part of the user message (rules and worked examples); `user_message` adds the task."""

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
VERIFY_VERSION = "solve-v1"
"""Part of the cache key when verifying: bump it whenever SOLVE_PROMPT changes."""
SOLVE_PROMPT = (
    "Solve the following math problem. Reason step by step, then write the final answer as "
    "\\boxed{{ANSWER}}.\n\nProblem: {problem}"
)
"""The user message that asks the endpoint to solve a candidate rephrasing (`--verify K`)."""
UNPARSED = "unparsed"
"""Asked for but not delivered: the answer had fewer `<rephrasing>` blocks than asked."""

MIN_LENGTH_RATIO, MAX_LENGTH_RATIO, MAX_CHARS = 0.5, 3.0, 4000
MAX_OUTPUT_CHARS = 200_000  # model output beyond this is ignored by the parser
SHOW_ROWS = 10  # how many filled row indices the report prints
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


# ----------------------------------------------------------------------------------------------
# The request


def user_message(question: str, k: int, accepted: Sequence[str] = ()) -> str:
    """The whole user message asking for `k` rephrasings of `question`; `accepted` (rephrasings
    kept in earlier rounds) are listed so that the new ones differ from them."""
    parts = [INSTRUCTION, "", "Now the problem to rephrase", f"Question: {question}"]
    if accepted:
        parts.append("These rephrasings already exist; each new one must differ from all of them:")
        parts.extend(f"- {a}" for a in accepted)
    parts.append(f"Write {k} rephrasing{'s' if k != 1 else ''}.")
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------------
# Parsing

_TAG = re.compile(r"<\s*(/?)\s*rephrasing\s*>", re.IGNORECASE)
_THINK_END = re.compile(r"</\s*think\s*>", re.IGNORECASE)


def parse_rephrasings(text: Any) -> list[str]:
    """The contents of the closed `<rephrasing>...</rephrasing>` blocks of a model answer, in
    order, stripped (possibly empty strings). Linear time; never raises."""
    if not isinstance(text, str):
        return []
    text = text[:MAX_OUTPUT_CHARS]
    ends = list(_THINK_END.finditer(text))
    if ends:
        text = text[ends[-1].end() :]
    blocks, start = [], None
    for m in _TAG.finditer(text):
        if m.group(1):  # a closing tag
            if start is not None:
                blocks.append(text[start : m.start()].strip())
            start = None
        else:  # an opening tag; an earlier unclosed one is dropped
            start = m.end()
    return blocks


# ----------------------------------------------------------------------------------------------
# Validation

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
    `accepted`, else the first broken rule's name (one of REASONS; see the module docstring)."""
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


# ----------------------------------------------------------------------------------------------
# The cache


def cache_key(question: str, model: str, n: int, verify: int = 0, answer: str = "") -> str:
    """SHA-256 of (question text, model, N, INSTRUCTION_VERSION), plus (K, VERIFY_VERSION, the
    ground truth) when the rephrasings are verified with K samples (`--verify K`)."""
    parts: list = [question, model, n, INSTRUCTION_VERSION]
    if verify:
        parts += [verify, VERIFY_VERSION, answer]
    payload = json.dumps(parts, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


def load_cache(path: Path) -> dict[str, dict]:
    """key -> record of every readable line of the cache (later lines win); a line cut short by a
    crash is skipped with a warning."""
    records: dict[str, dict] = {}
    if not path.exists():
        return records
    bad = 0
    with path.open("rb") as f:  # bytes: a line cut inside a multi-byte character is one bad line
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
                key, reph = rec["key"], rec["rephrasings"]
                if not isinstance(key, str) or not isinstance(reph, list):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            records[key] = rec
    if bad:
        print(f"warning: {path}: skipped {bad} unreadable line(s)", file=sys.stderr)
    return records


class CacheWriter:
    """Appends one JSON line per finished question, flushed and fsynced at once."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        cut_short = False  # a line cut short by a crash must not swallow the next one
        if path.exists() and path.stat().st_size:
            with path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                cut_short = f.read(1) != b"\n"
        self.file = path.open("a", encoding="utf-8")
        if cut_short:
            self.file.write("\n")

    def append(self, record: Mapping) -> None:
        self.file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()


# ----------------------------------------------------------------------------------------------
# The client


class RunError(Exception):
    """Stops the run; its message is safe to print (it never contains the API key)."""


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


@dataclass
class Client:
    """Chat completions through the `openai` SDK, whose own retries (connection errors, timeouts,
    408, 409, 429, 5xx; exponential backoff with jitter; `Retry-After` honoured) apply to every
    request. Counts HTTP requests and retries; stops the run on the first request that still
    fails after its retries, on any other 4xx, and when nothing has been answered for
    `stall_s` seconds."""

    base_url: str
    model: str
    api_key: str | None
    temperature: float
    timeout_s: float
    max_retries: int
    concurrency: int
    max_tokens: int | None = None  # None: the endpoint's default (vLLM: up to the model's context)
    stall_s: float | None = None  # None: 3 x timeout_s
    requests: int = 0
    retries: int = 0
    verify_max_tokens: int = 2048  # per solution of a candidate (`--verify K`)
    _sdk: Any = field(default=None, repr=False)
    _sem: asyncio.Semaphore | None = field(default=None, repr=False)
    _last_answer: float = field(default=0.0, repr=False)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    async def __aenter__(self) -> Client:
        import openai

        # no key: the SDK's placeholder (a local `vllm serve` without --api-key ignores it)
        self._sdk = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self.api_key or "EMPTY",
            timeout=self.timeout_s,
            max_retries=self.max_retries,
        )
        self._sem = asyncio.Semaphore(self.concurrency)
        self._last_answer = time.monotonic()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._sdk.close()

    async def probe(self) -> None:
        """Fail in seconds, not after every retry of every question, when nothing answers at
        base_url: one `GET /models` (10 s, one retry). Any HTTP answer, even an error, will do."""
        import openai

        try:
            await self._sdk.with_options(timeout=min(10.0, self.timeout_s), max_retries=1).models.list()
        except openai.APIStatusError:
            pass
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise RunError(
                f"nothing answers at {self.base_url} ({type(exc).__name__}: {_redact(str(exc), self.api_key)}); "
                "is the server running and --base-url right?"
            ) from None

    async def watchdog(self) -> None:
        """RunError once no request has been answered for `stall_s` seconds (a hung endpoint)."""
        limit = self.stall_s or 3 * self.timeout_s
        while True:
            await asyncio.sleep(min(limit, 1.0))
            if time.monotonic() - self._last_answer > limit:
                raise RunError(f"no answer from {self.url} for {limit:g} s; the endpoint seems to hang")

    async def complete(self, content: str) -> tuple[str, int, int]:
        """The answer's text for one user message, with (HTTP requests, retries) spent on it. A 200
        whose body is not a chat completion gives "" (the round finds no rephrasing)."""
        texts, reqs, retries, _ = await self._chat(content, 1, self.max_tokens)
        return texts[0], reqs, retries

    async def solve(self, problem: str, k: int) -> tuple[list[str], int, int, int]:
        """`k` sampled solutions of `problem` (SOLVE_PROMPT; one request, `n=k`), with (HTTP
        requests, retries, tokens as the endpoint reports them); missing choices come back as ""."""
        return await self._chat(SOLVE_PROMPT.format(problem=problem), k, self.verify_max_tokens)

    async def _chat(self, content: str, n: int, max_tokens: int | None) -> tuple[list[str], int, int, int]:
        """`n` answers' texts to one user message, (HTTP requests, retries), tokens used."""
        import openai

        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            "temperature": self.temperature,
        }
        if n > 1:
            kwargs["n"] = n
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        async with self._sem:
            try:
                raw = await self._sdk.chat.completions.with_raw_response.create(**kwargs)
            except openai.APIStatusError as exc:
                taken = _retries_taken(exc, self.max_retries)
                self.requests += 1 + taken
                self.retries += taken
                body = _redact(" ".join(exc.response.text.split())[:200], self.api_key)
                if _retryable(exc.status_code):
                    raise RunError(
                        f"request to {self.url} still failing after {taken} retries: "
                        f"HTTP {exc.status_code}{_retry_after_note(self._sdk, exc.response.headers)}"
                    ) from None
                raise RunError(f"HTTP {exc.status_code} from {self.url}: {body}") from None
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                taken = _retries_taken(exc, self.max_retries)
                self.requests += 1 + taken
                self.retries += taken
                problem = "timed out" if isinstance(exc, openai.APITimeoutError) else str(exc)
                raise RunError(
                    f"request to {self.url} still failing after {taken} retries: "
                    f"{_redact(problem, self.api_key)}"
                ) from None
        self._last_answer = time.monotonic()
        retries = raw.retries_taken
        self.requests += 1 + retries
        self.retries += retries
        texts, tokens = [], 0
        try:
            parsed = raw.parse()
            texts = [c.message.content for c in parsed.choices]
            tokens = int(getattr(parsed.usage, "total_tokens", 0) or 0)
        except (ValueError, AttributeError, IndexError, TypeError, openai.APIResponseValidationError):
            pass
        # an endpoint may echo what it was sent, the Authorization header too: never cache the key
        texts = [_redact(t, self.api_key) if isinstance(t, str) else "" for t in texts[:n]]
        return texts + [""] * (n - len(texts)), 1 + retries, retries, tokens


def _retries_taken(exc: Exception, default: int) -> int:
    """The retries the SDK made before the request that failed (it numbers each request's attempt
    in the `x-stainless-retry-count` header); `default` where the request cannot be read."""
    try:
        return int(exc.request.headers.get("x-stainless-retry-count", default))  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return default


def _retry_after_note(sdk: Any, headers: Any) -> str:
    """Why the SDK gave up early: a `Retry-After` beyond the longest wait it honours (120 s), read
    with the SDK's own parser (milliseconds, seconds or a date)."""
    from openai._constants import MAX_RETRY_AFTER_DELAY

    wait = sdk._parse_retry_after_header(headers)
    if wait is None or wait <= MAX_RETRY_AFTER_DELAY:
        return ""
    return (
        f" (the server asked to wait {wait:g} s before retrying, Retry-After; this tool waits "
        f"at most {MAX_RETRY_AFTER_DELAY} s, so it did not retry: try again later)"
    )


def _retryable(status: int) -> bool:
    """What the SDK retries: a final error with this status is reported with the retries it made."""
    return status in (408, 409, 429) or status >= 500


# ----------------------------------------------------------------------------------------------
# One question, the whole run


def _new_record(key: str, question: str, model: str, n: int) -> dict:
    return {
        "key": key,
        "question": question,
        "model": model,
        "n": n,
        "instruction_version": INSTRUCTION_VERSION,
        "rephrasings": [],
        "complete": False,
        "rounds": 0,
        "requested": 0,
        "rejected": dict.fromkeys((*REASONS, WRONG_ANSWER, UNPARSED), 0),
        "http_requests": 0,
        "retries": 0,
        "verified": [],  # per candidate solved: {"text", "correct", "of"}
        "verify_requests": 0,  # of http_requests, those that solved candidates
        "verify_tokens": 0,  # their prompt + completion tokens, as the endpoint reports them
    }


async def verify(client: Client, grader, candidate: str, answer: str, k: int) -> tuple[int, int, int, int]:
    """(correct, HTTP requests, retries, tokens): how many of `k` solutions of `candidate` the
    project's grader (lenient rule) finds equal to `answer`."""
    texts, reqs, retries, tokens = await client.solve(candidate, k)
    results = await asyncio.gather(*(asyncio.wrap_future(grader.submit(t, answer)) for t in texts))
    return sum(r["acc"] > 0 for r in results), reqs, retries, tokens


async def rephrase_question(
    client: Client,
    key: str,
    question: str,
    n: int,
    max_rounds: int,
    answer: str = "",
    k: int = 0,
    grader=None,
) -> dict:
    """Ask for the rephrasings of one question, round after round; returns its cache record.
    With `k` (> 0), a candidate that passes the text checks is kept only when more than half of
    `k` solutions of it by the endpoint are graded equal to `answer` (WRONG_ANSWER otherwise)."""
    rec = _new_record(key, question, client.model, n)
    accepted: list[str] = rec["rephrasings"]
    for _ in range(max_rounds):
        k_round = n - len(accepted)
        if k_round <= 0:
            break
        text, reqs, retries = await client.complete(user_message(question, k_round, accepted))
        rec["rounds"] += 1
        rec["requested"] += k_round
        rec["http_requests"] += reqs
        rec["retries"] += retries
        blocks = parse_rephrasings(text)[:k_round]
        rec["rejected"][UNPARSED] += k_round - len(blocks)
        passed = []
        for cand in blocks:
            reason = check_rephrasing(question, cand, [*accepted, *passed])
            if reason is None:
                passed.append(cand.strip())
            else:
                rec["rejected"][reason] += 1
        if k and passed:
            checks = await asyncio.gather(*(verify(client, grader, c, answer, k) for c in passed))
            kept = []
            for cand, (correct, reqs, retries, tokens) in zip(passed, checks, strict=True):
                rec["http_requests"] += reqs
                rec["retries"] += retries
                rec["verify_requests"] += reqs
                rec["verify_tokens"] += tokens
                rec["verified"].append({"text": cand, "correct": correct, "of": k})
                if 2 * correct > k:
                    kept.append(cand)
                else:
                    rec["rejected"][WRONG_ANSWER] += 1
            passed = kept
        accepted.extend(passed)
    rec["complete"] = len(accepted) >= n
    return rec


async def run_requests(
    client: Client,
    todo: Mapping[str, tuple[str, str]],
    n: int,
    max_rounds: int,
    cache: CacheWriter,
    done: dict,
    verify_k: int = 0,
) -> None:
    """Rephrase every question of `todo` (key -> (question, ground truth)), appending each
    finished one to the cache and to `done`; with `verify_k`, verify each candidate (rephrase_question).
    The first RunError cancels everything still in flight and propagates."""
    from tqdm import tqdm

    grader = None
    if verify_k:
        from grader.grade import Grader

        grader = Grader()
    async with client:
        await client.probe()
        with tqdm(total=len(todo), desc="rephrasing", unit="question", file=sys.stderr) as bar:

            async def one(key: str, question: str, answer: str) -> None:
                rec = await rephrase_question(client, key, question, n, max_rounds, answer, verify_k, grader)
                cache.append(rec)
                done[key] = rec
                bar.update(1)

            tasks = [asyncio.create_task(one(k, q, a)) for k, (q, a) in todo.items()]
            watchdog = asyncio.create_task(client.watchdog())
            try:
                for fut in asyncio.as_completed([*tasks, watchdog]):
                    await fut
                    if all(t.done() for t in tasks):
                        break
            finally:
                for t in [*tasks, watchdog]:
                    t.cancel()
                await asyncio.gather(*tasks, watchdog, return_exceptions=True)
                if grader is not None:
                    grader.close()


# ----------------------------------------------------------------------------------------------
# Summary


def summarize(rows: Sequence[Mapping], records: Mapping[str, dict], keys: Sequence[str], n: int) -> dict:
    """Counts over the questions of `rows` (keys[i] is row i's cache key)."""
    uniq = list(dict.fromkeys(keys))
    recs = [records[k] for k in uniq]
    rejected = Counter()
    for r in recs:
        rejected.update(r.get("rejected", {}))
    requested = sum(r.get("requested", 0) for r in recs)
    accepted = sum(min(len(r["rephrasings"]), n) for r in recs)
    filled_rows = [i for i, k in enumerate(keys) if len(records[k]["rephrasings"]) < n]
    return {
        "rows": len(rows),
        "questions": len(uniq),
        "requested": requested,
        "accepted": accepted,
        "acceptance_rate": round(accepted / requested, 4) if requested else None,
        "rejected": {r: rejected.get(r, 0) for r in (*REASONS, WRONG_ANSWER, UNPARSED)},
        "verified": sum(len(r.get("verified", [])) for r in recs),
        "verify_requests": sum(r.get("verify_requests", 0) for r in recs),
        "verify_tokens": sum(r.get("verify_tokens", 0) for r in recs),
        "filled_questions": sum(len(r["rephrasings"]) < n for r in recs),
        "filled_rows": filled_rows,
        "http_requests": sum(r.get("http_requests", 0) for r in recs),
        "retries": sum(r.get("retries", 0) for r in recs),
    }


def format_summary(s: Mapping, n: int, max_rounds: int, this_run: Mapping) -> str:
    rate = "n/a" if s["acceptance_rate"] is None else f"{100 * s['acceptance_rate']:.1f}%"
    lines = [
        f"questions: {s['questions']} ({s['rows']} rows)",
        f"rephrasings: requested {s['requested']}, accepted {s['accepted']} ({rate})",
        "rejected: " + ", ".join(f"{r} {c}" for r, c in s["rejected"].items()),
    ]
    rows = s["filled_rows"]
    if rows:
        more = f" and {len(rows) - SHOW_ROWS} more" if len(rows) > SHOW_ROWS else ""
        lines.append(
            f"filled: {s['filled_questions']} question(s), {len(rows)} row(s) had fewer than {n} valid "
            f"rephrasings after {max_rounds} round(s), filled by cycling their accepted ones (or the "
            f"original): rows {rows[:SHOW_ROWS]}{more}"
        )
    else:
        lines.append("filled: 0 questions")
    if s["verified"]:
        lines.append(
            f"verification: {s['verified']} candidate(s) solved by the endpoint, {s['rejected'][WRONG_ANSWER]} "
            f"rejected as {WRONG_ANSWER}; cost {s['verify_requests']} requests, {s['verify_tokens']} tokens"
        )
    lines.append(f"requests: {s['http_requests']}, retries: {s['retries']}")
    lines.append(
        f"this run: asked {this_run['asked']} question(s) ({this_run['cached']} from the cache), "
        f"{this_run['requests']} requests, {this_run['retries']} retries"
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Entry point


def _positive(kind: type, minimum: float):
    def parse(value: str):
        x = kind(value)
        if x < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return x

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m recipes.tools.rephrase",
        description="Fill the `rephrasings` column of a parquet file with N LLM rephrasings per question "
        "(TA-GRPO), through an OpenAI-compatible endpoint. See docs/rephrase.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python -m recipes.tools.rephrase --input $RECIPES_CACHE/data/math/train.parquet \\\n"
        "      --output $RECIPES_CACHE/data/math_rephrased/train.parquet --rephrasings 3 \\\n"
        "      --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct",
    )
    p.add_argument("--input", required=True, metavar="IN.parquet", help="rows in the project's schema")
    p.add_argument("--output", required=True, metavar="OUT.parquet", help="written atomically at the end")
    p.add_argument(
        "--rephrasings",
        "--n",
        dest="n",
        required=True,
        type=_positive(int, 1),
        metavar="N",
        help="rephrasings per question (recipes.ta_grpo.n_rephrasings; --n: its old name)",
    )
    p.add_argument(
        "--base-url", required=True, metavar="URL", help="e.g. http://localhost:8000/v1 (vllm serve)"
    )
    p.add_argument("--model", required=True, metavar="NAME", help="the model name the endpoint serves")
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="VAR",
        help="environment variable holding the API key (default %(default)s; unset: the placeholder EMPTY)",
    )
    p.add_argument(
        "--concurrency", type=_positive(int, 1), default=16, metavar="K", help="requests in flight (16)"
    )
    p.add_argument(
        "--max-retries",
        type=_positive(int, 0),
        default=5,
        metavar="R",
        help="retries per request (%(default)s)",
    )
    p.add_argument(
        "--timeout-s",
        type=_positive(float, 0.001),
        default=120.0,
        metavar="S",
        help="per request (%(default)s)",
    )
    p.add_argument(
        "--max-rounds",
        type=_positive(int, 1),
        default=3,
        metavar="R",
        help="rounds per question (%(default)s)",
    )
    p.add_argument(
        "--temperature",
        type=_positive(float, 0.0),
        default=0.8,
        metavar="T",
        help="sampling temperature (%(default)s)",
    )
    p.add_argument(
        "--max-tokens",
        type=_positive(int, 1),
        metavar="T",
        help="longest answer per request, in tokens (default: the endpoint's own limit)",
    )
    p.add_argument(
        "--verify",
        type=_positive(int, 0),
        default=3,
        metavar="K",
        help="keep a rephrasing only when more than half of K solutions of it by the same endpoint are "
        "graded equal to the row's answer (%(default)s; 0: text checks only)",
    )
    p.add_argument(
        "--verify-max-tokens",
        type=_positive(int, 1),
        default=2048,
        metavar="T",
        help="longest solution when verifying, in tokens (%(default)s)",
    )
    p.add_argument("--cache", metavar="PATH", help="JSONL cache (default OUT.parquet.cache.jsonl)")
    p.add_argument(
        "--stall-s",
        type=_positive(float, 0.001),
        metavar="S",
        help="stop when no request has been answered for this long (default 3 x --timeout-s)",
    )
    p.add_argument(
        "--max-filled",
        type=_positive(float, 0.0),
        default=0.5,
        metavar="F",
        help="fail (exit 1, no output) when more than this share of the questions ends without N valid "
        "rephrasings (%(default)s; 1 accepts any)",
    )
    return p


def _schema_notes(path: Path) -> list[str]:
    """What write_rows (ROW_SCHEMA) will not carry over from the input: extra columns and fields."""
    schema = pq.read_schema(path)
    notes = [f"column {c!r}" for c in schema.names if c not in COLUMNS]
    for name in COLUMNS:
        have, want = schema.field(name).type, ROW_SCHEMA.field(name).type
        if hasattr(have, "names") and hasattr(want, "names"):  # structs: extra fields
            notes += [f"field {name}.{f}" for f in have.names if f not in want.names]
    return notes


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if "--n" in (sys.argv[1:] if argv is None else argv):
        print("note: --n is now --rephrasings; the old name goes in the next release", file=sys.stderr)
    if not _ENV_NAME.fullmatch(args.api_key_env):  # never echo it: it may be the key itself
        parser.error(
            "--api-key-env takes the NAME of an environment variable (letters, digits, _), not a key"
        )
    src, out = Path(args.input), Path(args.output)
    cache_path = Path(args.cache) if args.cache else Path(str(out) + ".cache.jsonl")
    api_key = os.environ.get(args.api_key_env) or None
    try:
        validate_parquet(src)
    except DataError as exc:
        print(f"error: invalid input: {exc}", file=sys.stderr)
        return 1
    dropped = _schema_notes(src)
    if dropped:
        print(
            f"warning: {src}: the output is written with ROW_SCHEMA; not carried over: {', '.join(dropped)}",
            file=sys.stderr,
        )
    rows = pq.read_table(src).to_pylist()
    if any(r["rephrasings"] for r in rows):
        print(f"warning: {src}: existing rephrasings are replaced", file=sys.stderr)
    if api_key is None:
        print(
            f"note: ${args.api_key_env} is not set; sending requests without a real API key", file=sys.stderr
        )

    answers = [r["reward_model"]["ground_truth"] for r in rows]
    keys = [
        cache_key(r["extra_info"]["question"], args.model, args.n, args.verify, a)
        for r, a in zip(rows, answers, strict=True)
    ]
    records = load_cache(cache_path)
    questions = {k: r["extra_info"]["question"] for k, r in zip(keys, rows, strict=True)}
    truth = dict(zip(keys, answers, strict=True))
    todo = {k: (q, truth[k]) for k, q in questions.items() if k not in records}
    cached = len(questions) - len(todo)
    client = Client(
        args.base_url,
        args.model,
        api_key,
        args.temperature,
        args.timeout_s,
        args.max_retries,
        args.concurrency,
        args.max_tokens,
        args.stall_s,
        verify_max_tokens=args.verify_max_tokens,
    )
    if todo:
        print(
            f"{len(questions)} questions: {cached} in {cache_path}, asking {args.model} at {client.url} "
            f"for {len(todo)}",
            file=sys.stderr,
        )
        done: dict[str, dict] = {}
        cache = CacheWriter(cache_path)
        failed = None
        try:
            asyncio.run(run_requests(client, todo, args.n, args.max_rounds, cache, done, args.verify))
        except RunError as exc:
            failed, status = str(exc), 1
        except KeyboardInterrupt:
            failed, status = "interrupted", 130
        finally:
            cache.close()
        if failed is not None:
            finished = cached + len(done)
            print(
                f"error: {_redact(failed, api_key)}\n{finished} of {len(questions)} questions are finished "
                f"and kept in {cache_path}; rerun the same command to resume (no output written)",
                file=sys.stderr,
            )
            return status
        records.update(done)

    summary = summarize(rows, records, keys, args.n)
    this_run = {"asked": len(todo), "cached": cached, "requests": client.requests, "retries": client.retries}
    if summary["filled_questions"] > args.max_filled * summary["questions"]:
        print(format_summary(summary, args.n, args.max_rounds, this_run))
        print(
            f"error: {summary['filled_questions']} of {summary['questions']} questions have fewer than {args.n} "
            f"valid rephrasings (more than --max-filled {args.max_filled:g}); the endpoint's answers are "
            f"kept in {cache_path}. No output written: rerun with --max-filled 1 to write it from the cache "
            "(no new requests), or try another model.",
            file=sys.stderr,
        )
        return 1
    out_rows = []
    for row, key in zip(rows, keys, strict=True):
        new = dict(row)
        new["rephrasings"] = fill(questions[key], records[key]["rephrasings"][: args.n], args.n)
        out_rows.append(new)
    meta = {
        "tool": "recipes.tools.rephrase",
        "model": args.model,
        "n": args.n,
        "instruction_version": INSTRUCTION_VERSION,
        "temperature": args.temperature,
        "max_rounds": args.max_rounds,
        "verify": args.verify,
        "input": str(src),
        "input_meta": read_meta(src),
        "not_carried_over": dropped,
        "counts": {k: v for k, v in summary.items() if k != "filled_rows"},
        "filled_rows": summary["filled_rows"],
    }
    try:
        write_rows(out_rows, out, meta)
    except (DataError, OSError) as exc:
        print(f"error: could not write {out}: {exc}", file=sys.stderr)
        return 1
    print(format_summary(summary, args.n, args.max_rounds, this_run))
    print(f"wrote {out} ({len(out_rows)} rows); cache {cache_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
