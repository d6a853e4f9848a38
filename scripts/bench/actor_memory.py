"""The actor's training-phase memory and speed on one GPU, measured against `recipes.plan`.

    python scripts/bench/actor_memory.py spec --out spec.json        # here: the GPU presets' shapes + the plan
    python scripts/bench/actor_memory.py measure spec.json --out results.jsonl   # on a GPU (torch + transformers)
    python scripts/bench/actor_memory.py table spec.json results.jsonl           # Markdown, plan beside measured

`spec` composes every GPU preset on one GPU (trainer.n_gpus_per_node=1) and keeps each distinct
actor shape (the model's architecture, the update's and the log-prob pass's token limits, the
sequence length) with the plan's training-phase total at each of three moments: the update's
micro-batch, the optimizer step, the log-prob pass.

`measure` needs only torch and transformers, so it runs on a bare GPU machine. Each shape runs in
a process of its own: the model with random weights, trained as verl 0.9.1's FSDP2 engine does
without flash-attn (fp32 parameters, FSDP2 with bf16 compute and fp32 reductions, gradient
checkpointing, sdpa, AdamW, log-probs from the bf16 logits one sequence at a time, a clipped-ratio
loss, gradient clipping; no entropy in the update, as the presets' entropy_coeff is 0), three
updates and then a log-prob pass with the entropy. It records torch's peak allocated memory at
each moment once Adam's states exist, and the time of updates 2-3. vLLM is asleep in this phase of
a step (free_cache_engine) and is not part of it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GIB = 2**30


# ------------------------------------------------------------------------------ spec (here)
def spec(presets: list[str] | None = None) -> list[dict]:
    sys.path[:0] = [str(REPO), str(REPO / "scripts")]
    from gpu_smoke import gpu_presets

    from recipes import plan
    from recipes.train import compose

    shapes: dict[tuple, dict] = {}
    for preset in presets or gpu_presets():
        # packed: the probe replays full-length sequences, which no micro-batch pads (recipes/plan.py)
        cfg = compose(
            [
                f"experiment={preset}",
                "trainer.n_gpus_per_node=1",
                "trainer.nnodes=1",
                "recipes.attention=flash",
            ]
        )
        est = plan.estimate(cfg)
        arch = plan.arch_of(cfg)
        seq, tokens, logprob_tokens = plan.pass_tokens(cfg)
        key = (str(cfg.actor_rollout_ref.model.path), tokens, logprob_tokens, seq)
        if key in shapes:
            shapes[key]["presets"].append(preset)
            continue
        shapes[key] = {
            "id": f"{key[0]}@{tokens}/{logprob_tokens}x{seq}",
            "model": key[0],
            "arch": {
                "model_type": "qwen3" if arch.qk_norm else "qwen2" if arch.qkv_bias else "llama",
                "hidden_size": arch.hidden,
                "num_hidden_layers": arch.layers,
                "num_attention_heads": arch.heads,
                "num_key_value_heads": arch.kv_heads,
                "intermediate_size": arch.intermediate,
                "vocab_size": arch.vocab,
                "tie_word_embeddings": arch.tied,
                "head_dim": arch.hd,
            },
            "plan_params": arch.params(),
            "tokens": tokens,
            "logprob_tokens": logprob_tokens,
            "seq": seq,
            "checkpointing": bool(cfg.actor_rollout_ref.model.enable_gradient_checkpointing),
            # the CUDA context is outside torch's allocator: compare the rest with torch's peak
            "plan_gib": {k: round(v - plan.CUDA_CONTEXT_GIB, 3) for k, v in est.passes_gib.items()},
            "plan_tflops": plan.BF16_FLOPS * plan.MFU / 1e12,
            "presets": [preset],
        }
    return list(shapes.values())


# --------------------------------------------------------------------------- measure (GPU)
def micro_batch(tokens: int, seq: int) -> tuple[int, int]:
    """A micro-batch as sequences x length: the token limit in the fewest sequences no longer than
    the preset's prompt + response (what dynamic batching packs)."""
    batch = -(-tokens // seq)
    return batch, tokens // batch


def _build(shape: dict, device):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = dict(shape["arch"])
    config = AutoConfig.for_model(
        arch.pop("model_type"), **arch, max_position_embeddings=max(shape["seq"], 4096)
    )
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    if shape["checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mesh = torch.distributed.device_mesh.init_device_mesh(device.type, (1,))
    mp = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True
    )
    kwargs = {"mesh": mesh, "mp_policy": mp, "reshard_after_forward": True}
    units = list(model.model.layers)
    if not arch["tie_word_embeddings"]:
        units += [model.model.embed_tokens, model.lm_head]
    for unit in units:
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _log_probs(logits, labels):
    """verl's logprobs_from_logits_v2 for bf16 logits: a log-softmax per sequence."""
    import torch

    rows = [
        torch.log_softmax(row, dim=-1).gather(-1, lab.unsqueeze(-1)).squeeze(-1)
        for row, lab in zip(logits, labels, strict=True)
    ]
    return torch.stack(rows)


def _log_prob_pass(model, batch: int, seq: int, vocab: int, gen) -> None:
    """verl's compute_log_prob: no gradient, the entropy on (entropy_from_logits)."""
    import torch

    device = next(model.parameters()).device
    ids = torch.randint(0, vocab, (batch, seq), device=device, generator=gen)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1]
        logp = _log_probs(logits, ids[:, 1:])
        pd = torch.softmax(logits, dim=-1)
        entropy = torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)
    del logp, entropy


def _backward(model, batch: int, seq: int, vocab: int, gen) -> None:
    """The update's forward and backward of one micro-batch (verl's actor loss, clipped ratio)."""
    import torch

    device = next(model.parameters()).device
    ids = torch.randint(0, vocab, (batch, seq), device=device, generator=gen)
    logits = model(input_ids=ids, use_cache=False).logits[:, :-1]  # bf16
    logp = _log_probs(logits, ids[:, 1:])
    adv = torch.randn(logp.shape, device=device, generator=gen)
    ratio = torch.exp(logp - logp.detach())
    loss = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.28) * adv).mean()
    loss.backward()


def _step(model, opt) -> None:
    import torch

    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure(shape: dict, device_name: str) -> dict:
    """Three updates, then a log-prob pass; per moment, torch's peak once Adam's states exist (the
    updates after the first). An out-of-memory error is recorded with the moment it hit."""
    import torch

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    out = {"id": shape["id"], "device": device_name}
    if cuda:
        out["gpu"] = torch.cuda.get_device_name(device)
    vocab = shape["arch"]["vocab_size"]
    model = _build(shape, device)
    out["params"] = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    batch, seq = micro_batch(shape["tokens"], shape["seq"])
    out["batch"], out["seq"] = batch, seq
    gen = torch.Generator(device=device).manual_seed(0)
    peaks: dict[str, float] = {}
    times = []
    moment = "start"

    def run(name: str, fn, *args) -> None:
        nonlocal moment
        moment = name
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        fn(*args)
        if cuda:
            torch.cuda.synchronize(device)
            if len(times) > 0:  # Adam's states exist from the first step on
                peaks[name] = max(peaks.get(name, 0.0), torch.cuda.max_memory_allocated(device) / GIB)

    try:
        for update in range(1, 4):
            if cuda and update == 2:
                out["resident_gib"] = torch.cuda.memory_allocated(device) / GIB
            start = time.perf_counter()
            run("update", _backward, model, batch, seq, vocab, gen)
            run("optimizer step", _step, model, opt)
            times.append(time.perf_counter() - start)
        run(
            "log-prob", _log_prob_pass, model, *micro_batch(shape["logprob_tokens"], shape["seq"]), vocab, gen
        )
    except torch.OutOfMemoryError as exc:
        out["error"] = (
            f"out of memory in the {moment} (update {len(times) + 1}): " + str(exc).split("\n")[0][:160]
        )
        if cuda:
            out["allocated_at_error_gib"] = torch.cuda.max_memory_allocated(device) / GIB
    out["peaks_gib"] = peaks
    if len(times) == 3:
        out["s_per_update"] = statistics.median(times[1:])
        out["tflops"] = 8 * out["params"] * batch * seq / out["s_per_update"] / 1e12
    return out


# ------------------------------------------------------------------------------------ table
MOMENTS = ("update", "optimizer step", "log-prob")


def table(shapes: list[dict], results: list[dict]) -> str:
    by_id = {r["id"]: r for r in results}
    head = " | ".join(f"{m}: plan / measured GiB" for m in MOMENTS)
    lines = [
        f"| model | update micro-batch | presets | {head} | s per update | TFLOP/s (8PT/s) |",
        "|---|---|---|" + "---|" * len(MOMENTS) + "---|---|",
    ]
    for s in shapes:
        r = by_id.get(s["id"])
        cells = []
        for m in MOMENTS:
            planned = s["plan_gib"][m]
            got = (r or {}).get("peaks_gib", {}).get(m)
            if got is not None:
                cells.append(f"{planned:.1f} / {got:.1f}")
            elif r and f"the {m} " in r.get("error", ""):
                cells.append(f"{planned:.1f} / out of memory (at {r['allocated_at_error_gib']:.1f})")
            else:
                cells.append(f"{planned:.1f} / -")
        secs = f"{r['s_per_update']:.2f}" if r and "s_per_update" in r else "-"
        tflops = f"{r['tflops']:.0f}" if r and "tflops" in r else "-"
        batch = " x ".join(f"{n:,}" for n in micro_batch(s["tokens"], s["seq"]))
        lines.append(
            f"| {s['model']} | {batch} | {len(s['presets'])} | {' | '.join(cells)} | {secs} | {tflops} |"
        )
    return (
        "\n".join(lines)
        + f"\n\nThe plan's time model assumes {shapes[0]['plan_tflops']:.0f} TFLOP/s (8PT/s)."
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("spec")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--presets", default="", help="comma-separated subset (default: every GPU preset)")
    m = sub.add_parser("measure")
    m.add_argument("spec", type=Path)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--device", default="cuda")
    m.add_argument("--only", help="measure this shape id in this process")
    m.add_argument(
        "--budget-s", type=float, default=300.0, help="start no shape but the first after this many seconds"
    )
    t = sub.add_parser("table")
    t.add_argument("spec", type=Path)
    t.add_argument("results", type=Path)
    args = ap.parse_args(argv)

    if args.cmd == "spec":
        shapes = spec([p for p in args.presets.split(",") if p] or None)
        args.out.write_text(json.dumps(shapes, indent=1) + "\n")
        print(f"{len(shapes)} shapes from {sum(len(s['presets']) for s in shapes)} presets -> {args.out}")
        return 0
    shapes = json.loads(args.spec.read_text())
    if args.cmd == "table":
        results = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
        print(table(shapes, results))
        return 0

    if args.only is None:  # each shape in a process of its own: nothing of one stays for the next
        started = time.monotonic()
        for i, shape in enumerate(
            sorted(shapes, key=lambda s: s["plan_params"] * s["tokens"])
        ):  # largest last
            if i and time.monotonic() - started > args.budget_s:
                print(f"{shape['id']}: not measured (budget of {args.budget_s:.0f} s spent)", flush=True)
                continue
            cmd = [sys.executable, __file__, "measure", str(args.spec), "--out", str(args.out)]
            subprocess.run([*cmd, "--device", args.device, "--only", shape["id"]], check=False)
        return 0
    import torch

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    backend = "nccl" if args.device.startswith("cuda") else "gloo"
    torch.distributed.init_process_group(backend, rank=0, world_size=1)
    result = measure(next(s for s in shapes if s["id"] == args.only), args.device)
    with args.out.open("a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps(result), flush=True)
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
