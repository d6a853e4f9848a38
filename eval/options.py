"""The evaluation's command-line options, shared by eval.run and eval.iterate.

`add_eval_arguments` adds the option groups to a parser (the options a --protocol sets default to
None there); `eval_kwargs` turns the parsed options into `evaluate`'s keyword arguments, each
setting the option's when given, else the --protocol's, else DEFAULTS'; `protocol_note` is the one
line naming the options that changed a protocol. `int_in`, `number_in` and `byte_size` are argparse
types. A range is checked by the argparse type; a bad combination of options is EvalError in one
sentence. Nothing is read or written.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from eval import benchmarks as bm
from eval.backends import BACKENDS, Decoding
from eval.convert import int_list
from eval.request import MAX_RUNS, EvalError, default_backend
from recipes import protocols

# What an option means when neither it nor a --protocol sets it: the prompt-augmentation paper's
# evaluation (protocols.PROTOCOLS["prompt_aug"], a test keeps them equal), and for sampling the
# values TA-GRPO's pass@k used before protocols existed.
DEFAULTS: dict[str, Any] = {
    "benchmarks": ",".join(bm.DEFAULT_SUITE),
    "template": "qwen-math",
    "decoding": "greedy",
    "temperature": 0.6,
    "top_p": 0.95,
    "max_new_tokens": 3000,
    "max_model_len": 4096,
    "grading": "boxed",
}


DTYPES = ("auto", "float32", "float16", "bfloat16", "float", "half")  # what both backends take


def byte_size(text: str) -> int:
    """A size in bytes from `536870912`, `512M`, `512MiB`, `4G`, `1.5GiB` (K, M, G, T: powers of 1,024)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = 1
    if t and t[-1] in "KMGT":
        scale, t = 1024 ** ("KMGT".index(t[-1]) + 1), t[:-1]
    try:
        size = int(float(t) * scale)
    except ValueError:
        size = 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 4G, got {text!r}")
    return size


def int_in(low: int, high: int | None = None):
    """An argparse type: an integer in low..high (high None: no bound)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            span = f"at least {low:,}" if high is None else f"from {low:,} to {high:,}"
            raise argparse.ArgumentTypeError(f"must be {span}, got {text}")
        return value

    return parse


def number_in(low: float, high: float | None = None, *, above: bool = False):
    """An argparse type: a finite number >= low (> low with `above`), <= high when given."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if (
            not math.isfinite(value)
            or value < low
            or (above and value == low)
            or (high is not None and value > high)
        ):
            span = f"{'above' if above else 'at least'} {low:g}" + (
                f" and at most {high:g}" if high is not None else ""
            )
            raise argparse.ArgumentTypeError(f"must be a finite number {span}, got {text}")
        return value

    return parse


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """The evaluation settings, shared with eval.iterate. The options a --protocol sets default to
    None here, so that eval_kwargs can tell an option given from one left to the protocol."""
    g = p.add_argument_group("paper protocol")
    g.add_argument(
        "--protocol",
        choices=[*protocols.PROTOCOLS, protocols.NONE],
        help=protocols.help_text(),
    )
    g = p.add_argument_group(
        "benchmarks", "a --protocol sets --benchmarks; the defaults below hold without one"
    )
    g.add_argument(
        "--benchmarks",
        help=f"comma-separated names (default: the prompt-augmentation paper's five). Known: {', '.join(bm.SPECS)}",
    )
    g.add_argument("--data-dir", help="read DIR/<name>.jsonl instead of the HF hub (fields problem, answer)")
    g.add_argument(
        "--limit", type=int_in(1), help="only the first N questions of each benchmark (quick checks)"
    )
    g = p.add_argument_group(
        "prompt and decoding",
        "a --protocol sets every option here but --seed; the defaults below hold without one",
    )
    g.add_argument(
        "--template",
        help="prompt template: any of `python -m prompt_aug.templates list`, `none` (question as the "
        f"user turn), `raw` (no chat template), or a protocol's prompt ({', '.join(protocols.PROMPTS)}). "
        "Default qwen-math, as the prompt-augmentation paper evaluated",
    )
    g.add_argument(
        "--decoding",
        choices=("greedy", "sample"),
        help="greedy: temperature 0, --repeats runs averaged (avg@R); sample: --n samples per question at "
        "--temperature/--top-p, pass@k (default greedy)",
    )
    g.add_argument(
        "--repeats",
        type=int_in(1, MAX_RUNS),
        help=f"greedy: runs averaged, avg@R (default 5, the prompt-augmentation paper's avg@5; at most {MAX_RUNS})",
    )
    g.add_argument(
        "--n",
        type=int_in(1, MAX_RUNS),
        help=f"sample: samples per question (default 32; at most {MAX_RUNS})",
    )
    g.add_argument(
        "--k", type=int_list, help="sample: pass@k for these k (default 1,2,4,...,n; a protocol's: its own)"
    )
    g.add_argument("--temperature", type=number_in(0), help="sample: temperature (default 0.6)")
    g.add_argument("--top-p", type=number_in(0, 1, above=True), help="sample: nucleus top-p (default 0.95)")
    g.add_argument("--max-new-tokens", type=int_in(1), help="default 3000 (the paper's)")
    g.add_argument("--max-model-len", type=int_in(2), help="prompt + response tokens (default 4096)")
    g.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="sampling seed (default 0)")
    g.add_argument("--grading", choices=("boxed", "lenient"), help="answer extraction (default boxed)")
    g = p.add_argument_group("backend")
    g.add_argument(
        "--backend",
        choices=BACKENDS,
        help="default: vllm where it can run (vLLM's CPU build, or vLLM and a GPU), else hf",
    )
    g.add_argument(
        "--batch-size", type=int_in(1), default=8, help="hf: prompts per generate call (default 8)"
    )
    g.add_argument(
        "--chunk-size",
        type=int_in(1),
        help="prompts per generate call and per write to samples.jsonl (default: hf its batch size, vllm all "
        "prompts of a repeat); smaller loses less work to an interruption",
    )
    g.add_argument("--dtype", choices=DTYPES, help="model dtype (default: hf float32, vllm auto)")
    g.add_argument("--tensor-parallel-size", type=int_in(1), default=1, help="vllm: GPUs per engine")
    g.add_argument(
        "--gpu-memory-utilization",
        type=number_in(0, 1, above=True),
        default=0.9,
        help="vllm on a GPU: share of GPU memory (default 0.9); unused on a CPU",
    )
    g.add_argument(
        "--kv-cache-memory",
        type=byte_size,
        metavar="SIZE",
        help="vllm: KV cache size, e.g. 512M or 4G (default: 512M on a CPU; on a GPU "
        "--gpu-memory-utilization decides)",
    )
    g.add_argument(
        "--max-num-batched-tokens",
        type=int_in(1),
        help="vllm: tokens per engine step (default: 1024 on a CPU, where the engine warms up on a batch "
        "this large; vLLM's own on a GPU)",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bars (loading nor generating)")


def eval_kwargs(args: argparse.Namespace) -> dict:
    """`evaluate` keyword arguments from parsed `add_eval_arguments` options (each option's range is
    its argparse type's; what depends on two options is checked here, EvalError in one sentence).
    Each setting is the option's when given, else the --protocol's, else DEFAULTS'; a protocol's
    samples and ks apply only to its own decoding (--decoding greedy beside a sampling protocol
    takes --repeats, default 5)."""
    try:
        proto = protocols.get(getattr(args, "protocol", None))
    except protocols.ProtocolError as e:
        raise EvalError(str(e)) from None

    def pick(name: str) -> Any:
        given = getattr(args, name)
        if given is not None:
            return given
        theirs = getattr(proto, name, None)
        if name == "benchmarks" and theirs is not None:
            theirs = ",".join(theirs)
        return theirs if theirs is not None else DEFAULTS[name]

    mode = pick("decoding")
    own = proto is not None and proto.decoding == mode  # the protocol's samples and ks apply
    try:
        decoding = Decoding(
            mode=mode,
            temperature=pick("temperature"),
            top_p=pick("top_p"),
            max_new_tokens=pick("max_new_tokens"),
            max_model_len=pick("max_model_len"),
            seed=args.seed,
        )
    except ValueError as e:
        raise EvalError(str(e)) from None
    why = f" (--protocol {proto.name} {'samples' if mode == 'sample' else 'decodes greedily'})" if own else ""
    if mode == "greedy":
        if args.n is not None or args.k is not None:
            raise EvalError(f"--n and --k are for --decoding sample; greedy takes --repeats{why}")
        runs = args.repeats if args.repeats is not None else (proto.runs if own else 5)
        ks = []
    else:
        if args.repeats is not None:
            raise EvalError(f"--repeats is for greedy decoding; sampling takes --n{why}")
        runs = args.n if args.n is not None else (proto.runs if own else 32)
        if args.k:
            ks = args.k
        elif own:  # the paper's k, as far as the samples reach
            ks = [k for k in proto.ks if k <= runs] or [1]
        else:
            ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= runs]
    return dict(
        benchmarks=[b.strip() for b in pick("benchmarks").split(",") if b.strip()],
        data_dir=args.data_dir,
        limit=args.limit,
        template=pick("template"),
        decoding=decoding,
        runs=runs,
        ks=ks,
        grading=pick("grading"),
        backend=args.backend or default_backend(),
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        dtype=args.dtype,
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_memory_bytes=args.kv_cache_memory,
        max_num_batched_tokens=args.max_num_batched_tokens,
        progress=not args.no_progress,
        protocol=proto.name if proto else None,
    )


def protocol_note(kwargs: dict) -> str | None:
    """The one line saying which options changed the --protocol (None when none did, or no protocol)."""
    proto = protocols.get(kwargs.get("protocol"))
    if proto is None:
        return None
    return protocols.describe_overrides(proto.name, protocols.overrides(proto, **_override_fields(kwargs)))


def _override_fields(kwargs: dict) -> dict:
    keys = ("benchmarks", "template", "decoding", "runs", "ks", "grading", "limit")
    return {k: kwargs[k] for k in keys}
