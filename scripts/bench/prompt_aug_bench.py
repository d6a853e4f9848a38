"""What prompt augmentation costs per rollout, next to what verl does without it.

    .venv/bin/python scripts/bench/prompt_aug_bench.py [--prompts 2000] [--tokenizer PATH]

For each of N (question, session) pairs it times, single-threaded, on the CPU:
  verl default   the prompt ids verl's single-turn agent loop builds for the dataset's prompt
                 (`apply_chat_template(messages, tokenize=True, add_generation_prompt=True)`, the
                 call inside its continuous-token builder): question + instruction as the user turn
  ours           the template draw (TemplateSampler.choose) plus `prompt_aug.templates.prompt_ids`
                 for the drawn template (render through the chat template, then tokenize)
and prints a table with the ratio. The tokenizer defaults to the tiny model's ChatML tokenizer
(built in about a second, no files); `--tokenizer` takes any local HF tokenizer folder. Writes
nothing. Needs no GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from prompt_aug.sampling import make_sampler  # noqa: E402
from prompt_aug.templates import prompt_ids  # noqa: E402
from recipes.tools.data import INSTRUCTION, toy_arithmetic_pairs  # noqa: E402


def per_call_us(fn, items, repeats: int = 3) -> tuple[float, float]:
    """Median and min over `repeats` passes of the mean microseconds per item."""
    passes = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for item in items:
            fn(item)
        passes.append((time.perf_counter() - t0) / len(items) * 1e6)
    return statistics.median(passes), min(passes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--tokenizer", default=None, help="a local HF tokenizer folder (default: tiny's)")
    args = parser.parse_args()

    if args.tokenizer:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.tokenizer)
        name = args.tokenizer
    else:
        from recipes.tools.models import tiny_tokenizer

        tok, name = tiny_tokenizer(), "tiny (ChatML, 768-token BPE)"
    questions = [q for q, _ in toy_arithmetic_pairs(args.prompts, 1, seed=0)[0]]
    items = [(i, q) for i, q in enumerate(questions)]
    sampler = make_sampler(sampling="per_rollout", seed=0)

    def verl_default(item):
        _, q = item
        return tok.apply_chat_template(
            [{"role": "user", "content": q + INSTRUCTION}], tokenize=True, add_generation_prompt=True
        )

    def ours(item):
        row, q = item
        return prompt_ids(sampler.choose(0, row, row % 8), q, tok)

    def draw_only(item):
        return sampler.choose(0, item[0], item[0] % 8)

    base, base_min = per_call_us(verl_default, items)
    aug, aug_min = per_call_us(ours, items)
    draw, draw_min = per_call_us(draw_only, items)
    lengths = [len(ours(it)) for it in items[:200]]
    print(f"tokenizer: {name}; {len(items)} prompts, single thread, median (min) of 3 passes\n")
    print("| prompt building, per rollout | us | ratio to verl default |")
    print("|---|---:|---:|")
    print(f"| verl default (dataset prompt) | {base:.0f} ({base_min:.0f}) | 1.00 |")
    print(f"| ours: draw + render + tokenize | {aug:.0f} ({aug_min:.0f}) | {aug / base:.2f} |")
    print(f"| of which the template draw | {draw:.0f} ({draw_min:.0f}) | {draw / base:.2f} |")
    print(f"\nmean prompt length under the drawn templates: {statistics.mean(lengths):.0f} tokens")


if __name__ == "__main__":
    main()
