"""What is sent to the endpoint and how its answer is read: the rephrasing instruction (with its
version, part of the cache key), the prompt that asks for a candidate's solution (`--verify K`),
and the parser of `<rephrasing>` blocks (docs/rephrase.md#the-instruction)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

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
VERIFY_VERSION = "solve-v1"
"""Part of the cache key when verifying: bump it whenever SOLVE_PROMPT changes."""
SOLVE_PROMPT = (
    "Solve the following math problem. Reason step by step, then write the final answer as "
    "\\boxed{{ANSWER}}.\n\nProblem: {problem}"
)
"""The user message that asks the endpoint to solve a candidate rephrasing (`--verify K`)."""

MAX_OUTPUT_CHARS = 200_000  # model output beyond this is ignored by the parser


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
