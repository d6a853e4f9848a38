"""A run's memory per GPU and disk, estimated before it starts.

    python -m recipes.plan experiment=prompt_aug_qwen2_5_math_1_5b
    python -m recipes.plan experiment=cw_grpo_open_rs model=qwen2_5_math_7b_instruct --gpu-gib 139.8
    python -m recipes.plan experiment=demo_cpu                      # CPU presets: this machine's RAM

Takes the same overrides as `python -m recipes.train` (and `--gpu-gib G`, the memory of one GPU,
default an 80 GB H100's 79.6 GiB; `--disk-gib D`, the disk a run may fill, default 500 GiB; both in
GiB, as nvidia-smi and `df -h` count). Prints,
per GPU, the two phases of a step of verl's hybrid engine, which share the GPU in turn:

  rollout   the actor's parameters and Adam states stay resident (unless offloaded); vLLM takes
            its `gpu_memory_utilization` share of the GPU: its bf16 weights, then KV cache
  training  vLLM sleeps (weights and KV cache freed); the actor adds gradients and, for the
            largest micro-batch (the dynamic-batch token limit, or micro-batch x sequence
            length), its checkpointed activations and the logits pass over the vocabulary

then the checkpoint sizes and the run's disk under recipes.checkpoints.keep_full. The last line
is machine-readable (<a>: flash, sdpa, or an attn_implementation set by hand):

    plan: peak_gib_per_gpu=<n> gpu_gib=<n> checkpoint_gib=<n> run_disk_gib=<n> attention=<a> fits=yes|no

Exit status 0 when the run fits (peak <= --gpu-gib and disk <= --disk-gib), 3 when it does not,
2 on bad input (an argument or the config, said in one line). The arithmetic, and what it leaves
out, is in docs/running.md#memory-and-disk-plan: an estimate to compare with the first GPU run's
measured peak (`scripts/gpu_smoke.sh` prints both). The model's shape comes from recipes/plan_model.py,
what a training pass computes (its attention, its padding) from recipes/plan_passes.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from pathlib import Path

from omegaconf import DictConfig

from recipes.methods import manifest
from recipes.plan_model import KNOWN, Arch, arch_of  # noqa: F401  (KNOWN: read here by the tests)
from recipes.plan_passes import (  # noqa: F401  (the tests and scripts/bench read these here)
    Attention,
    Passes,
    attention_of,
    micro_batches,
    padded,
    pass_tokens,
    passes,
    simulated_lengths,
)
from recipes.platforms import registry as platforms
from recipes.settings import ConfigError, select

GIB = 2**30
H100_GIB = 79.6  # nvidia-smi's 81,559 MiB
DISK_GIB = 500.0
CUDA_CONTEXT_GIB = 1.0  # CUDA context, NCCL and allocator buffers per process (estimate)
# The CPU platform's processes (Ray, vLLM's engine, the workers) and their libraries: the tiny
# demo's peak summed RSS, whose tensors are a few MB (docs/benchmarks.md, `make demo`)
CPU_PROCESSES_GIB = 6.0
# Time, a first-order model until a GPU run calibrates it (docs/running.md#memory-and-disk-plan):
# decoding reads the bf16 weights and every running sequence's KV cache once per generated token,
# at this share of an H100's 3.35 TB/s; training runs at this share of its 989 TFLOPS dense bf16.
HBM_BYTES_S, HBM_SHARE = 3.35e12, 0.5
BF16_FLOPS, MFU = 989e12, 0.35
MEAN_LENGTH = 0.5  # responses and prompts at half their limits (an assumption, said on the line)
VLLM_OVERHEAD_GIB = 2.0  # vLLM's activations and CUDA graphs inside its share (estimate)
# Copies of the T x V logits in the compute dtype that a pass holds at its peak. The update: the
# logits and the log-softmax kept for the backward; measured on an H200 with verl's update replayed
# (scripts/bench/actor_memory.py: 2.8-3.2 bytes a token and vocabulary entry, under the 4 that two
# bf16 copies count). The log-prob pass (no backward, the entropy on): the logits, the softmax and
# their product (its total measured within 1.2x)
LOGITS_COPIES_UPDATE = 2
LOGITS_COPIES_LOGPROB = 3


# Training rows of each dataset (its configs/data/*.yaml), when the prepared file is not at hand.
ROWS = {
    "math_l3to5": 8523,
    "math": 7500,
    "math_rephrased": 7500,
    "ta_math_a9u": 6496,  # questions; inferred: their 406 steps = 2 x floor(8 rows a question x Q / 256)
    "ta_math": 7498,  # the TA-GRPO paper's count of MATH train (their filter: 56 steps, not 58)
    "open_rs": 7000,
    "deepscaler": 40315,
    "toy_arithmetic": 2000,
}


def rows_of(cfg: DictConfig) -> int:
    files = select(cfg, "data.train_files")
    files = [files] if isinstance(files, str) else list(files or [])
    if files and all(Path(f).is_file() for f in files):
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    name = select(cfg, "recipes.data")
    if name not in ROWS:
        raise ConfigError(
            f"data.train_files: not on this machine, and the size of data {name!r} is not known."
        )
    limit = select(cfg, "data.train_max_samples")
    return min(ROWS[name], limit) if limit and limit > 0 else ROWS[name]


def training_steps(cfg: DictConfig, rows: int) -> int:
    """verl's count: trainer.total_training_steps, else epochs x full batches (drop_last)."""
    steps = select(cfg, "trainer.total_training_steps")
    if steps:
        return int(steps)
    return int(select(cfg, "trainer.total_epochs")) * (rows // int(select(cfg, "data.train_batch_size")))


def saves(steps: int, save_freq: int) -> int:
    """verl saves at multiples of save_freq and at the last step."""
    if save_freq <= 0:
        return 0
    return steps // save_freq + (1 if steps % save_freq else 0)


@dataclasses.dataclass
class Estimate:
    rows: list[tuple[str, float, float]]  # (what, rollout GiB, training GiB) per GPU
    notes: list[str]
    peak_gib: float
    device_gib: float
    checkpoint_gib: float
    hf_gib: float
    run_disk_gib: float
    disk_limit_gib: float
    header: str
    step_s: float | None = None  # the time model's seconds a step (GPU platform only)
    steps: int = 0
    passes_gib: dict[str, float] = dataclasses.field(default_factory=dict)  # training total per pass
    attention: Attention | None = None
    train_s: float | None = None  # of step_s, the training passes'
    flash: Estimate | None = None  # recipes.attention=auto: the same run with FlashAttention 2

    @property
    def fits(self) -> bool:
        return self.peak_gib <= self.device_gib and self.run_disk_gib <= self.disk_limit_gib


def _ram_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


@dataclasses.dataclass(frozen=True)
class _Actor:
    """The actor's bytes per GPU in each phase, and what its FSDP config offloads."""

    policy: bool  # offload_policy: on the CPU throughout
    param_off: bool
    optim_off: bool
    params: float  # training phase
    grads: float
    adam: float
    params_rollout: float
    adam_rollout: float


def _actor(cfg: DictConfig, p: int, world: int) -> _Actor:
    actor = "actor_rollout_ref.actor"
    # param_offload / optimizer_offload move them to the CPU between updates (the rollout phase);
    # verl's train mode loads them back for the update. offload_policy (FSDP2's CPU offload) keeps
    # them on the CPU throughout, the optimizer step included.
    policy = bool(select(cfg, f"{actor}.fsdp_config.offload_policy"))
    param_off = policy or bool(select(cfg, f"{actor}.fsdp_config.param_offload"))
    optim_off = policy or bool(select(cfg, f"{actor}.fsdp_config.optimizer_offload"))
    params, grads, adam = (0.0, 0.0, 0.0) if policy else (4 * p / world, 4 * p / world, 8 * p / world)
    params_rollout = 0.0 if param_off else 4 * p / world
    adam_rollout = 0.0 if optim_off else 8 * p / world
    return _Actor(policy, param_off, optim_off, params, grads, adam, params_rollout, adam_rollout)


_Moment = tuple[str, int, float, float, float, float]  # (pass, tokens, activations, logits, gathered, Adam's)


def _moments(
    cfg: DictConfig, a: Arch, p: int, world: int, cpu: bool, policy: bool, tokens: Passes
) -> list[_Moment]:
    """The training phase's three moments, each (pass, tokens, activations, logits, gathered, Adam's
    temporary): the update's micro-batch; the log-prob pass (old and reference log-probs, no
    backward); the optimizer step, where torch's AdamW (foreach, its default for GPU tensors) holds
    one fp32 copy of the parameters it updates (none under offload_policy or on a CPU)."""
    mp = select(cfg, "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype") or "bf16"
    compute = 4 if mp in ("fp32", "float32") else 2
    update_tokens, infer_tokens = tokens.update, tokens.infer
    checkpointed = bool(select(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing"))
    layer = 2 * (4 * a.hidden + 4 * a.intermediate) * compute  # one layer's recompute, + its grads
    stored = (a.hidden * compute) if checkpointed else (4 * a.hidden + 4 * a.intermediate) * compute
    activations = update_tokens * (a.layers * stored + layer)
    logits_update = update_tokens * a.vocab * compute * LOGITS_COPIES_UPDATE
    logits_infer = infer_tokens * a.vocab * compute * LOGITS_COPIES_LOGPROB
    gathered = 2 * (p - a.vocab * a.hidden * (1 if a.tied else 2)) / a.layers * compute  # 2 layers unsharded
    return [
        ("update", update_tokens, activations, logits_update, gathered, 0.0),
        ("log-prob", infer_tokens, 0.0, logits_infer, gathered, 0.0),
        ("optimizer step", 0, 0.0, 0.0, 0.0, 0.0 if policy or cpu else 4 * p / world),
    ]


@dataclasses.dataclass(frozen=True)
class _Rollout:
    """vLLM's share of the device (GiB) and what its KV cache holds, per replica."""

    tp: int
    replicas: int
    weights_gib: float
    kv_gib: float
    vllm_gib: float
    kv_token: int  # bytes of K and V a token
    fit_seqs: int  # sequences the KV cache holds at once
    asked: int  # sequences a step asks of each replica
    device_gib: float
    device: str


def _rollout(cfg: DictConfig, a: Arch, p: int, world: int, cpu: bool, gpu_gib: float) -> _Rollout:
    rollout = "actor_rollout_ref.rollout"
    seq = pass_tokens(cfg)[0]
    tp = int(select(cfg, f"{rollout}.tensor_model_parallel_size") or 1)
    weights_gib = 2 * p / tp / GIB if not cpu else 4 * p / GIB
    if cpu:
        vllm_gib = (
            weights_gib + int(select(cfg, f"{rollout}.engine_kwargs.vllm.kv_cache_memory_bytes") or 0) / GIB
        )
        kv_gib = vllm_gib - weights_gib
        device_gib = _ram_gib()
        device = f"this machine's {device_gib:.1f} GiB of RAM (CPU platform: every worker in it, float32)"
    else:
        util = float(select(cfg, f"{rollout}.gpu_memory_utilization"))
        vllm_gib = util * gpu_gib
        kv_gib = max(vllm_gib - weights_gib - VLLM_OVERHEAD_GIB, 0.0)
        device_gib = gpu_gib
        device = f"a GPU of {gpu_gib:.1f} GiB"
    kv_token = 2 * a.layers * a.kv_heads * a.hd * (2 if not cpu else 4)
    fit_seqs = int(kv_gib * GIB // (kv_token * seq)) if kv_token else 0
    replicas = max(world // tp, 1)
    asked = math.ceil(int(select(cfg, "data.train_batch_size")) * int(select(cfg, f"{rollout}.n")) / replicas)
    return _Rollout(
        tp, replicas, weights_gib, kv_gib, vllm_gib, kv_token, fit_seqs, asked, device_gib, device
    )


def _uses_kl(cfg: DictConfig) -> bool:
    """A reference model is kept (and run) for a KL term."""
    in_loss = bool(select(cfg, "actor_rollout_ref.actor.use_kl_loss"))
    return in_loss or bool(select(cfg, "algorithm.use_kl_in_reward"))


def _memory_rows(
    cfg: DictConfig,
    a: Arch,
    p: int,
    world: int,
    cpu: bool,
    actor: _Actor,
    vllm: _Rollout,
    work: _Moment,
    unit: str = "tokens",
) -> list[tuple[str, float, float]]:
    """The report's table, GiB per GPU in each phase, its last row the totals."""
    checkpointed = bool(select(cfg, "actor_rollout_ref.model.enable_gradient_checkpointing"))
    sleeps = bool(select(cfg, "actor_rollout_ref.rollout.free_cache_engine"))
    context = CPU_PROCESSES_GIB if cpu else CUDA_CONTEXT_GIB
    reference = 4 * p / world if cpu and _uses_kl(cfg) else 0.0  # verl's CPU offload: on the CPU it is in RAM
    weights_gib, kv_gib, vllm_gib = vllm.weights_gib, vllm.kv_gib, vllm.vllm_gib
    rows = [
        (f"actor parameters (fp32, sharded over {world})", actor.params_rollout / GIB, actor.params / GIB),
        ("gradients (fp32)", 0.0, actor.grads / GIB),
        ("Adam states (2 x fp32)", actor.adam_rollout / GIB, actor.adam / GIB),
        ("reference (fp32, offloaded by verl to the CPU)", reference / GIB, reference / GIB),
        # vLLM sleeps during the update (free_cache_engine), except where it cannot (the CPU)
        (f"vLLM (weights {weights_gib:.1f} + KV cache {kv_gib:.1f})", vllm_gib, 0.0 if sleeps else vllm_gib),
        (
            f"activations ({work[0]}, {work[1]:,} {unit}, checkpointed: {checkpointed})",
            0.0,
            work[2] / GIB,
        ),
        (f"logits ({work[1]:,} {unit} x {a.vocab:,} vocabulary)", 0.0, work[3] / GIB),
        ("Adam step's temporary (fp32, one copy of the parameters)", 0.0, work[5] / GIB),
        (
            "processes (Ray, vLLM, workers)" if cpu else "gathered layers, CUDA context and buffers",
            context,
            (work[4] / GIB) + context,
        ),
    ]
    rows.append(("total", sum(r[1] for r in rows), sum(r[2] for r in rows)))
    return rows


def _memory_notes(p: int, world: int, actor: _Actor, vllm: _Rollout, seq: int) -> list[str]:
    """What the table leaves out: host memory under offloading; how much the KV cache holds."""
    notes = []
    if actor.param_off or actor.optim_off:
        host = (8 * p if actor.param_off else 0) + (8 * p if actor.optim_off else 0)
        when = "throughout (offload_policy)" if actor.policy else "during rollout"
        notes.append(f"offloaded to host memory {when}: {host / world / GIB:.1f} GiB per GPU's process")
    fit_seqs, asked = vllm.fit_seqs, vllm.asked
    notes.append(
        f"vLLM: {vllm.replicas} replica(s) of TP {vllm.tp}; the KV cache holds {fit_seqs:,} sequences of {seq:,} "
        f"tokens at once, a step asks {asked:,} per replica"
        + ("" if fit_seqs >= asked else " (the rest wait their turn: slower, not out of memory)")
    )
    return notes


@dataclasses.dataclass(frozen=True)
class _Disk:
    """A checkpoint's size and the run's disk under recipes.checkpoints.keep_full (bytes)."""

    full: int  # a whole checkpoint
    hf: int  # as HF weights
    steps: int
    run: int
    note: str


def _disk(cfg: DictConfig, p: int) -> _Disk:
    full = 12 * p  # fp32 parameters + Adam's two fp32 moments (+ small records)
    hf = 2 * p  # bf16 HuggingFace weights (eval.convert)
    steps = training_steps(cfg, rows_of(cfg))
    n_saves = saves(steps, int(select(cfg, "trainer.save_freq")))
    keep = select(cfg, "recipes.checkpoints.keep_full")
    # what the active methods add to a whole checkpoint (recipes/methods/manifest.py)
    snapshot = p * sum(
        d.checkpoint_bytes_per_param for d in manifest.active(select(cfg, "recipes.methods") or {})
    )
    if keep is None:
        disk = n_saves * (full + snapshot)
        rule = f"every save kept whole ({n_saves} x {(full + snapshot) / GIB:.1f} GiB)"
    else:
        whole = min(n_saves, int(keep))
        disk = whole * (full + snapshot) + n_saves * hf
        rule = f"{whole} kept whole + {n_saves} as HF weights (recipes.checkpoints.keep_full={keep})"
    note = (
        f"disk: a checkpoint is {full / GIB:.1f} GiB whole (fp32 parameters + Adam), {hf / GIB:.1f} GiB as "
        f"HF weights; {steps:,} steps, {n_saves} saves (every {select(cfg, 'trainer.save_freq')}): {rule} "
        f"= {disk / GIB:.0f} GiB"
    )
    return _Disk(full, hf, steps, disk, note)


def _step_time(
    cfg: DictConfig, p: int, world: int, computed: Passes, vllm: _Rollout, steps: int
) -> tuple[float, float, str]:
    """The time model's seconds a step and of them training's (GPU platform), and its note."""
    from recipes.extensions import on_policy

    seq = computed.seq
    tp, replicas = vllm.tp, vllm.replicas
    # decoding: one token for each of `batch` running sequences per read of weights + KV cache
    batch = max(min(vllm.fit_seqs, vllm.asked), 1)
    ctx = MEAN_LENGTH * seq
    per_token_s = (2 * p / tp + batch * ctx * vllm.kv_token) / (HBM_BYTES_S * HBM_SHARE * tp)
    generated = int(select(cfg, "data.train_batch_size")) * int(select(cfg, "actor_rollout_ref.rollout.n"))
    max_response = int(select(cfg, "data.max_response_length"))
    throughput_s = generated * MEAN_LENGTH * max_response * per_token_s / batch / replicas
    gen_s = max(throughput_s, max_response * per_token_s)  # the longest response ends the rollout
    # training: update 8PT (forward, recomputed forward, backward), + 2PT per extra forward pass
    # (reference, old log-probs), each over the tokens it computes: with padding kept, more than T
    tokens = generated * MEAN_LENGTH * seq
    forwards = (2 if _uses_kl(cfg) else 0) + (0 if on_policy.active(cfg) else 2)
    passes = 8 * computed.update_work + forwards * computed.infer_work
    train_s = passes * p * tokens / (BF16_FLOPS * MFU * world)
    step_s = gen_s + train_s
    padding = "" if computed.update_work == computed.infer_work == 1 else ", padding included"
    note = (
        f"time (uncalibrated model): ~{step_s:.0f} s a step = generation ~{gen_s:.0f} s + training "
        f"~{train_s:.0f} s{padding}, for prompts and responses at half their limits; {steps:,} steps "
        f"~{hours(steps * step_s)} h (docs/running.md#memory-and-disk-plan)"
    )
    return step_s, train_s, note


def hours(seconds: float) -> str:
    """Hours as the plan prints them: one decimal under 10 h (0.6 h, not a rounded 1 h)."""
    h = seconds / 3600
    return f"{h:.1f}" if h < 10 else f"{h:.0f}"


def estimate(cfg: DictConfig, gpu_gib: float = H100_GIB, disk_gib: float = DISK_GIB) -> Estimate:
    """The run's memory per GPU in each phase, its disk and (GPU platform) its time a step, for
    the attention attention_of assumes; under `auto`, FlashAttention 2's figures too (.flash)."""
    attention = attention_of(cfg)
    e = _estimate(cfg, gpu_gib, disk_gib, attention)
    if attention.other is not None:
        flash = e.flash = _estimate(cfg, gpu_gib, disk_gib, attention.other)
        time = "" if flash.step_s is None else f", ~{flash.step_s:.0f} s a step"
        e.notes.append(
            f"with FlashAttention 2 (flash-attn installed on the GPU nodes, recipes.attention=flash): "
            f"training {flash.rows[-1][2]:.1f} GiB per GPU, peak {flash.peak_gib:.1f}{time}"
        )
    return e


def _estimate(cfg: DictConfig, gpu_gib: float, disk_gib: float, attention: Attention) -> Estimate:
    a = arch_of(cfg)
    p = a.params()
    cpu = platforms.of(cfg).host_memory  # RAM, float32 weights, no time model (platform=cpu)
    world = int(select(cfg, "trainer.n_gpus_per_node")) * int(select(cfg, "trainer.nnodes"))
    tokens = passes(cfg, world, attention)
    seq = tokens.seq
    actor = _actor(cfg, p, world)
    moments = _moments(cfg, a, p, world, cpu, actor.policy, tokens)
    work = max(moments, key=lambda m: sum(m[2:]))
    vllm = _rollout(cfg, a, p, world, cpu, gpu_gib)
    rows = _memory_rows(cfg, a, p, world, cpu, actor, vllm, work, tokens.unit)
    rollout_total, training_total = rows[-1][1], rows[-1][2]
    peak = max(rollout_total, training_total)
    # the training phase's total at each moment (scripts/bench/actor_memory.py measures them)
    rest = training_total - sum(work[2:]) / GIB
    passes_gib = {m[0]: rest + sum(m[2:]) / GIB for m in moments}

    # the padding's share of the time (the CPU platform has no time model, its memory no change)
    notes = ([tokens.note] if tokens.note and not cpu else []) + _memory_notes(p, world, actor, vllm, seq)
    disk = _disk(cfg, p)
    notes.append(disk.note)
    step_s = train_s = None
    if not cpu:
        step_s, train_s, note = _step_time(cfg, p, world, tokens, vllm, disk.steps)
        notes.append(note)
    size = f"{p / 1e9:.2f}B" if p >= 1e8 else f"{p / 1e6:.2f}M"
    header = (
        f"run: {select(cfg, 'actor_rollout_ref.model.path')} ({size} parameters), "
        f"{world} GPU(s) ({select(cfg, 'trainer.nnodes')} node(s)), {vllm.device}"
    )
    return Estimate(
        rows,
        notes,
        peak,
        vllm.device_gib,
        disk.full / GIB,
        disk.hf / GIB,
        disk.run / GIB,
        disk_gib,
        header,
        step_s,
        disk.steps,
        passes_gib,
        attention,
        train_s,
    )


def report(e: Estimate) -> str:
    width = max(len(r[0]) for r in e.rows) + 2
    lines = [e.header, e.attention.line, f"{'per GPU, GiB':<{width}}{'rollout':>9}{'training':>10}"]
    for what, roll, train in e.rows:
        lines.append(f"  {what:<{width - 2}}{roll:>9.1f}{train:>10.1f}")
    if e.peak_gib > e.device_gib:
        lines.append(f"OVER: the peak {e.peak_gib:.1f} GiB exceeds the {e.device_gib:.1f} GiB available")
    lines += e.notes
    if e.run_disk_gib > e.disk_limit_gib:
        lines.append(
            f"OVER: the run writes {e.run_disk_gib:.0f} GiB, more than {e.disk_limit_gib:.0f} GiB (--disk-gib)"
        )
    lines.append(
        f"plan: peak_gib_per_gpu={e.peak_gib:.1f} gpu_gib={e.device_gib:.1f} "
        f"checkpoint_gib={e.checkpoint_gib:.1f} run_disk_gib={e.run_disk_gib:.0f} attention={e.attention.name} "
        f"fits={'yes' if e.fits else 'no'}"
    )
    return "\n".join(lines)


def _gib(value: str) -> float:
    """A size in GiB: a finite number above 0 (nan, inf and 0 would make every plan fit or none)."""
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a size in GiB (a finite number above 0)")
    return x


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m recipes.plan",
        usage="python -m recipes.plan [--gpu-gib G] [--disk-gib D] experiment=NAME [recipes.train overrides]",
        description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 the run fits; 3 it does not (peak over --gpu-gib or disk over --disk-gib); "
        "2 bad input (an argument or the config). docs/running.md#memory-and-disk-plan",
    )
    p.add_argument(
        "--gpu-gib",
        type=_gib,
        default=H100_GIB,
        metavar="G",
        help="memory of one GPU, GiB (default: 80 GB H100's 79.6)",
    )
    p.add_argument(
        "--disk-gib",
        type=_gib,
        default=DISK_GIB,
        metavar="D",
        help="disk the run may fill, GiB (default 500)",
    )
    args, overrides = p.parse_known_args(argv)
    flags = [a for a in overrides if a.startswith("-")]  # Hydra's own flags compose nothing to plan
    if flags:
        renamed = (
            " (the disk is --disk-gib, in GiB like --gpu-gib)" if flags[0].startswith("--disk-gb") else ""
        )
        p.error(f"unrecognized arguments: {' '.join(flags)}{renamed}")
    from recipes.compose import check_overrides, compose
    from recipes.console import held

    check_overrides(overrides)
    try:
        with held(enabled=True, expected=(ConfigError,)):
            e = estimate(compose(overrides), args.gpu_gib, args.disk_gib)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(report(e), flush=True)
    return 0 if e.fits else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
