"""What one GPU's training passes compute, for recipes.plan: the tokens of the update's and the
log-prob pass's largest micro-batch, and the padding they compute with.

The attention decides what a micro-batch computes (`recipes.attention`, recipes/platforms/gpu.py):
FlashAttention 2 with remove-padding packs its sequences, so it computes their real tokens; PyTorch's
sdpa keeps the padding and computes every sequence at the micro-batch's longest. `auto` is planned
as sdpa, the worse, with FlashAttention 2's figures on a line of their own: auto takes flash only
where the GPU nodes have flash-attn installed, which the plan, often run elsewhere, cannot see.
With padding kept, the plan splits one GPU's batch into micro-batches with verl's own function
(rearrange_micro_batches), for responses spread evenly from 0 to their limit and prompts at half
theirs, and counts the padded tokens.
"""

from __future__ import annotations

import dataclasses
import functools

from omegaconf import DictConfig

from recipes.platforms.gpu import ATTENTION_CHOICES, ATTN_KEY, RMPAD_KEY
from recipes.settings import ConfigError, select

# With padding kept, at most this many of a GPU's sequences go through verl's split: it takes a few
# seconds at 512 and half a minute at 2,048 (ta_grpo_math_256q's log-prob pass), and the largest
# micro-batch it gives already moves ~10% either way from one count to the next (the work: <1%)
SIMULATED_MAX = 512


def pass_tokens(cfg: DictConfig) -> tuple[int, int, int]:
    """(prompt + response, tokens in the update's largest micro-batch, in the log-prob pass's)."""
    actor = "actor_rollout_ref.actor"
    seq = int(select(cfg, "data.max_prompt_length")) + int(select(cfg, "data.max_response_length"))
    if select(cfg, f"{actor}.use_dynamic_bsz"):
        update = max(int(select(cfg, f"{actor}.ppo_max_token_len_per_gpu")), seq)
        infer = max(int(select(cfg, "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu")), seq)
    else:
        update = int(select(cfg, f"{actor}.ppo_micro_batch_size_per_gpu") or 1) * seq
        infer = int(select(cfg, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu") or 1) * seq
    return seq, update, infer


@dataclasses.dataclass(frozen=True)
class Attention:
    """The attention the plan assumes, and whether a micro-batch's padding is removed (packed)."""

    name: str  # the last line's: flash, sdpa, or an attn_implementation set by hand
    packed: bool
    line: str  # the report's "attention:" line: what and why
    other: Attention | None = None  # recipes.attention=auto: FlashAttention 2, whose figures are noted


def attention_of(cfg: DictConfig) -> Attention:
    """What recipes.train's GPU launch would choose (recipes/platforms/gpu.py resolve_attention),
    except that `auto` is planned as sdpa: flash-attn on the GPU nodes is not visible from here."""
    impl = select(cfg, ATTN_KEY)
    rmpad = bool(select(cfg, RMPAD_KEY))
    kept = "padding removed" if rmpad else "padding kept"
    if impl not in (None, "flash_attention_2"):  # set by hand, or by the CPU platform
        why = f"{ATTN_KEY}={impl}, {RMPAD_KEY}={str(rmpad).lower()}"
        return Attention(str(impl), rmpad, f"attention: {impl}, {kept}: {why}")
    choice = select(cfg, "recipes.attention") or "auto"
    if choice not in ATTENTION_CHOICES:
        raise ConfigError(f"recipes.attention={choice}: one of {', '.join(ATTENTION_CHOICES)}.")
    if choice == "flash":
        why = "recipes.attention=flash" + ("" if rmpad else f", {RMPAD_KEY}=false")
        return Attention("flash", rmpad, f"attention: FlashAttention 2, {kept} ({why})")
    if choice == "sdpa":
        return Attention("sdpa", False, "attention: PyTorch's sdpa, padding kept (recipes.attention=sdpa)")
    flash = Attention("flash", rmpad, f"attention: FlashAttention 2, {kept} (flash-attn installed)")
    return Attention(
        "sdpa",
        False,
        "attention: PyTorch's sdpa, padding kept: recipes.attention=auto planned at its worse, since it "
        "takes FlashAttention 2 only where the GPU nodes have flash-attn, which the plan cannot see "
        "(recipes.attention=flash plans for it)",
        flash,
    )


def simulated_lengths(n: int, prompt: int, response: int) -> list[int]:
    """One GPU's n sequences as the plan assumes them when padding counts: prompts at half their
    limit and responses spread evenly from 0 to theirs (the i-th at the middle of the i-th of n
    equal slices), so that they average half their limits, as the time model assumes."""
    return [prompt // 2 + (2 * i + 1) * response // (2 * n) for i in range(n)]


@functools.lru_cache(maxsize=64)
def micro_batches(lengths: tuple[int, ...], max_token_len: int) -> tuple[tuple[int, ...], ...]:
    """The sequence lengths of each micro-batch verl makes of one GPU's (mini-)batch by token count
    (use_dynamic_bsz): its own rearrange_micro_batches, which its engine calls
    (verl/workers/engine/utils.py prepare_micro_batches). Real tokens only are counted against
    max_token_len, so with padding kept a micro-batch computes more than the budget."""
    import torch
    from tensordict import TensorDict
    from verl.utils.seqlen_balancing import rearrange_micro_batches

    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    batch = TensorDict({"input_ids": mask, "attention_mask": mask}, batch_size=[len(lengths)])
    _, parts = rearrange_micro_batches(batch, max_token_len=max_token_len)
    return tuple(tuple(lengths[i] for i in part) for part in parts)


def padded(parts: tuple[tuple[int, ...], ...]) -> list[int]:
    """The tokens each micro-batch computes with its padding: verl's engine pads a micro-batch to
    its own longest sequence (transformer_impl.py prepare_model_inputs, to_padded_tensor)."""
    return [len(part) * max(part) for part in parts]


@dataclasses.dataclass(frozen=True)
class Passes:
    """What the update and the log-prob pass compute per GPU."""

    seq: int  # prompt + response limits
    unit: str  # what the micro-batches' tokens are: "tokens", or "tokens with padding"
    update: int  # tokens in the update's largest micro-batch, padding included where kept
    infer: int  # in the log-prob pass's
    update_work: float = 1.0  # tokens computed over real tokens, the whole pass (1: packed)
    infer_work: float = 1.0
    note: str = ""


def passes(cfg: DictConfig, world: int, attention: Attention) -> Passes:
    """pass_tokens, and with padding kept what the padded micro-batches compute (memory: the
    largest; time: all of them over the real tokens) for the simulated lengths."""
    seq, update, infer = pass_tokens(cfg)
    if attention.packed:
        return Passes(seq, "tokens", update, infer)
    actor = "actor_rollout_ref.actor"
    prompt, response = (
        int(select(cfg, "data.max_prompt_length")),
        int(select(cfg, "data.max_response_length")),
    )
    n = int(select(cfg, "actor_rollout_ref.rollout.n"))
    per_gpu = {
        "update": max(int(select(cfg, f"{actor}.ppo_mini_batch_size")) * n // world, 1),
        "log-prob": max(int(select(cfg, "data.train_batch_size")) * n // world, 1),
    }
    spread = f"responses spread evenly from 0 to {response:,} tokens, prompts of {prompt // 2:,}"
    if not select(cfg, f"{actor}.use_dynamic_bsz"):
        # fixed micro-batches of m sequences in no particular order: each computed at its longest,
        # on average prompt/2 + response x m/(m+1); the largest already counted at the limit
        work = {}
        for what, key in (
            ("update", f"{actor}.ppo_micro_batch_size_per_gpu"),
            ("log-prob", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"),
        ):
            m = min(int(select(cfg, key) or 1), per_gpu[what])
            work[what] = (prompt // 2 + response * m / (m + 1)) / (prompt // 2 + response / 2)
        note = (
            f"padding: each micro-batch is computed at its longest sequence; for {spread}: "
            f"{work['update']:.2f}x the real tokens in the update, {work['log-prob']:.2f}x in the log-prob pass"
        )
        return Passes(seq, "tokens", update, infer, work["update"], work["log-prob"], note)
    largest, work = {}, {}
    for what, budget in (("update", update), ("log-prob", infer)):
        lengths = simulated_lengths(min(per_gpu[what], SIMULATED_MAX), prompt, response)
        tokens = padded(micro_batches(tuple(lengths), budget))
        # never under the budget: responses that all run to the limit fill a micro-batch with
        # real tokens and no padding, which is what the packed plan counts
        largest[what], work[what] = max(*tokens, budget), sum(tokens) / sum(lengths)

    def count(what: str) -> str:
        n = per_gpu[what]
        return f"{n:,}" if n <= SIMULATED_MAX else f"{n:,} (simulated as {SIMULATED_MAX})"

    note = (
        f"padding: each micro-batch is computed at its longest sequence; for {spread}, verl's split "
        f"(rearrange_micro_batches) gives micro-batches of up to {largest['update']:,} tokens against the "
        f"{update:,}-token budget ({largest['update'] / update:.2f}x) in the update (a GPU's {count('update')} "
        f"sequences) and of up to {largest['log-prob']:,} ({largest['log-prob'] / infer:.2f}x) in the log-prob "
        f"pass (its {count('log-prob')}); the passes compute {work['update']:.2f}x and {work['log-prob']:.2f}x "
        "their real tokens"
    )
    unit = "tokens with padding"
    return Passes(seq, unit, largest["update"], largest["log-prob"], work["update"], work["log-prob"], note)
