"""Offline question rephrasing for TA-GRPO (Le et al. 2026, arXiv 2601.22478): N meaning-preserving
rephrasings of every question of a parquet file, made once before training by any OpenAI-compatible
chat endpoint. docs/rephrase.md says how it asks, checks, verifies, caches and fills.

Contract: reads IN.parquet (the row schema of recipes.tools.data, validated before any request);
writes OUT.parquet, the same rows with exactly N strings in `rephrasings`, atomically and only when
every question has finished; each finished question is appended at once to the JSONL cache
(default OUT.parquet.cache.jsonl), so a rerun of the same command asks only for the rest. The API
key is read only from the variable named by --api-key-env and is never printed or written. The
summary goes to stdout; progress, warnings and errors to stderr. An --output or --cache that
this tool did not write is refused (its content kept) unless --force. Exit status: 0 done; 1 a run
that could not finish, or more than --max-filled of the questions without N valid rephrasings (no
output written); 2 bad input (an option, an input file that breaks the schema, a refused
--output or --cache), before any request; 130 Ctrl-C.

Command (from the repository root):

    python -m recipes.tools.rephrase --input IN.parquet --output OUT.parquet --rephrasings 3 \\
        --base-url URL --model NAME [--api-key-env OPENAI_API_KEY] [--concurrency 16]
        [--max-retries 5] [--timeout-s 120] [--max-rounds 3] [--temperature 0.8] [--max-tokens T]
        [--verify 3] [--verify-max-tokens 2048] [--cache PATH] [--stall-s S] [--max-filled 0.5]
        [--force]

Modules: `prompt` (the instruction, the solve prompt, the parser), `check` (the text rules, the
fill rule), `client` (the endpoint), `cache`, `run` (rounds, verification, the summary), `cli`.
"""

from recipes.tools.rephrase.cache import CacheWriter, cache_key, load_cache
from recipes.tools.rephrase.check import (
    MAX_CHARS,
    MAX_LENGTH_RATIO,
    MIN_LENGTH_RATIO,
    REASONS,
    UNPARSED,
    WRONG_ANSWER,
    check_rephrasing,
    fill,
    math_spans,
    numbers,
    operators,
    signed_numbers,
)
from recipes.tools.rephrase.cli import build_parser, main
from recipes.tools.rephrase.client import Client, RunError
from recipes.tools.rephrase.prompt import (
    INSTRUCTION,
    INSTRUCTION_VERSION,
    MAX_OUTPUT_CHARS,
    SOLVE_PROMPT,
    VERIFY_VERSION,
    parse_rephrasings,
    user_message,
)
from recipes.tools.rephrase.run import (
    SHOW_ROWS,
    format_summary,
    rephrase_question,
    run_requests,
    summarize,
    verify,
)

__all__ = [
    "INSTRUCTION",
    "INSTRUCTION_VERSION",
    "MAX_CHARS",
    "MAX_LENGTH_RATIO",
    "MAX_OUTPUT_CHARS",
    "MIN_LENGTH_RATIO",
    "REASONS",
    "SHOW_ROWS",
    "SOLVE_PROMPT",
    "UNPARSED",
    "VERIFY_VERSION",
    "WRONG_ANSWER",
    "CacheWriter",
    "Client",
    "RunError",
    "build_parser",
    "cache_key",
    "check_rephrasing",
    "fill",
    "format_summary",
    "load_cache",
    "main",
    "math_spans",
    "numbers",
    "operators",
    "parse_rephrasings",
    "rephrase_question",
    "run_requests",
    "signed_numbers",
    "summarize",
    "user_message",
    "verify",
]
