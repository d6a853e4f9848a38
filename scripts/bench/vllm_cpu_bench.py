"""Rollout generation on a CPU: vLLM's CPU build (float32 and bfloat16) against transformers
`generate`, the same prompts and the same number of tokens, one run, one table.

    .venv/bin/python scripts/bench/vllm_cpu_bench.py                       # SmolLM2-135M-Instruct
    .venv/bin/python scripts/bench/vllm_cpu_bench.py --model tiny --prompts 32 --n 8 --tokens 64

The work is a GRPO rollout step: `--prompts` toy-arithmetic questions in the model's chat
template, `--n` samples each at temperature 1, exactly `--tokens` new tokens per sample (stop
tokens ignored, so every contender generates the same count). Each contender runs in a fresh
process, one after the other:

- transformers: float32, sdpa attention, left-padded batches of 64 rows, one `generate` per
  batch (how this project's own rollout server batched requests before vLLM replaced it);
- vLLM float32 and bfloat16: `vllm.LLM` with the settings of configs/platform/cpu.yaml (eager,
  512 MiB KV cache, 1,024 batched tokens), all prompts in one `generate`. vLLM's CPU worker keeps
  one core for its engine loop by default; "allcores" sets VLLM_CPU_NUM_OF_RESERVED_CPU=0.

Columns: start-up (model load; for vLLM the engine's processes, warm-up and KV cache), generation
seconds, generated tokens per second, speed-up over transformers, and the peak resident memory of
the contender's processes. The model is built first if missing (outside the timing). Needs no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_profile import descendants_rss  # noqa: E402

CONTENDERS = ("transformers", "vllm-float32", "vllm-bfloat16", "vllm-float32-allcores")
HF_BATCH = 64


def prompts(model_path: Path, n_prompts: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from recipes.tools.data import make_prompt, toy_arithmetic_pairs

    tok = AutoTokenizer.from_pretrained(model_path)
    train, _ = toy_arithmetic_pairs(n_prompts, 1, seed=0)
    return [
        tok.apply_chat_template(make_prompt(q), add_generation_prompt=True, tokenize=True, return_dict=False)
        for q, _ in train
    ]


def run_transformers(model_path: Path, ids: list[list[int]], n: int, tokens: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    startup = time.perf_counter() - t0
    rows = [p for p in ids for _ in range(n)]
    t0, generated = time.perf_counter(), 0
    with torch.no_grad():
        for start in range(0, len(rows), HF_BATCH):
            batch = rows[start : start + HF_BATCH]
            width = max(len(p) for p in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros_like(input_ids)
            for i, p in enumerate(batch):
                input_ids[i, width - len(p) :] = torch.tensor(p)
                mask[i, width - len(p) :] = 1
            out = model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                pad_token_id=pad,
            )
            generated += (out.shape[1] - width) * len(batch)
    return {"startup_s": startup, "gen_s": time.perf_counter() - t0, "tokens": generated}


def run_vllm(model_path: Path, ids: list[list[int]], n: int, tokens: int, dtype: str) -> dict:
    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(
        model=str(model_path),
        dtype=dtype,
        enforce_eager=True,
        kv_cache_memory_bytes=512 * 2**20,
        max_num_batched_tokens=1024,
        max_model_len=max(len(p) for p in ids) + tokens,
        seed=0,
    )
    startup = time.perf_counter() - t0
    params = SamplingParams(n=n, temperature=1.0, max_tokens=tokens, ignore_eos=True)
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in ids], params, use_tqdm=False)
    gen = time.perf_counter() - t0
    return {
        "startup_s": startup,
        "gen_s": gen,
        "tokens": sum(len(o.token_ids) for r in outs for o in r.outputs),
    }


def child(args: argparse.Namespace) -> None:
    ids = prompts(args.model_path, args.prompts)
    if args.child == "transformers":
        result = run_transformers(args.model_path, ids, args.n, args.tokens)
    else:
        result = run_vllm(args.model_path, ids, args.n, args.tokens, args.child.split("-")[1])
    print("RESULT=" + json.dumps(result), flush=True)


def measure(args: argparse.Namespace, name: str, tmp: Path) -> dict:
    """Run one contender in a fresh process; its result plus the peak RSS of its process tree."""
    cmd = [sys.executable, __file__, "--child", name, "--model-path", str(args.model_path)]
    cmd += ["--prompts", str(args.prompts), "--n", str(args.n), "--tokens", str(args.tokens)]
    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp / "vllm"), "VLLM_RPC_BASE_PATH": str(tmp)}
    env["VLLM_NO_USAGE_STATS"] = "1"
    env["TORCHDYNAMO_DISABLE"] = "1"  # as platform=cpu and eval run vLLM (recipes/platforms/cpu_vllm.py)
    if name.endswith("-allcores"):
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    log = (tmp / f"{name}.log").open("w+")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        peak = max(peak, descendants_rss(root))
        time.sleep(0.5)
    log.seek(0)
    text = log.read()
    lines = [line for line in text.splitlines() if line.startswith("RESULT=")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"{name} failed ({proc.returncode}):\n{text[-3000:]}")
    return {**json.loads(lines[-1][len("RESULT=") :]), "peak_gb": peak / 2**30}


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--model", default="smollm2_135m", choices=("tiny", "smollm2_135m"))
    p.add_argument("--prompts", type=int, default=32, help="questions (default 32)")
    p.add_argument("--n", type=int, default=8, help="samples per question (default 8)")
    p.add_argument("--tokens", type=int, default=64, help="new tokens per sample (default 64)")
    p.add_argument(
        "--contenders", default=",".join(CONTENDERS), help=f"comma-separated subset of {','.join(CONTENDERS)}"
    )
    p.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--model-path", type=Path, help="a local model folder instead of --model")
    args = p.parse_args()
    unknown = set(args.contenders.split(",")) - set(CONTENDERS)
    if unknown:
        p.error(f"unknown contenders {sorted(unknown)}")
    if args.child:
        child(args)
        return
    from recipes.tools.models import ensure_model

    args.model_path = args.model_path or ensure_model(args.model)
    print(
        f"{args.model_path.name}: {args.prompts} prompts x {args.n} samples x {args.tokens} tokens, "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.contenders.split(","):
            results[name] = measure(args, name, Path(tmp))
            print(f"  {name}: {results[name]}", flush=True)
    first = next(iter(results.values()))
    base = first["tokens"] / first["gen_s"]
    print()
    print(f"| contender | start-up s | generation s | tokens/s | vs {next(iter(results))} | peak RSS GiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        rate = r["tokens"] / r["gen_s"]
        print(
            f"| {name} | {r['startup_s']:.1f} | {r['gen_s']:.1f} | {rate:.0f} | {rate / base:.2f}x "
            f"| {r['peak_gb']:.2f} |"
        )


if __name__ == "__main__":
    main()
