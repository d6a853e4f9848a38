"""What greedy decoding would have written, asked of the model itself: a float32 transformers
forward over prompt + response gives each response token's log-probability next to that of the
position's most probable token. Used by tests that must tell sampled from greedy output, or two
greedy decoders apart, without counting how diverse a tiny model's outputs are (that depends on
the CPU's kernels: a few updates or a near tie read differently on AVX2 and on AVX-512).

Callers give token ids. Samples store text, so the tests re-encode it and keep responses that
re-encode to as many tokens as were generated (those are the tokens the decoder chose)."""

from __future__ import annotations

import math
from pathlib import Path

import torch

# A token "greedy would not pick" has less than half the probability of the position's most
# probable token: a gap of log 2 = 0.69 nats, orders of magnitude beyond the float32 differences
# between two ways of summing (~1e-5 nats: up to 9e-6 between this model's batched, single and
# left-padded forwards here), so a near tie never counts.
OFF_GREEDY_NATS = math.log(2)


def response_logprobs(model: str | Path, pairs: list[tuple[list[int], list[int]]]) -> list[torch.Tensor]:
    """For each (prompt ids, response ids): a (len(response), vocab) tensor of float32 log-probs,
    row t the distribution response token t was drawn from."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32).eval()
    seqs = [torch.tensor(p + r) for p, r in pairs]
    # right-padded, no attention mask: causal attention never lets a real token see the padding
    ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=0)
    with torch.inference_mode():
        logp = torch.log_softmax(lm(input_ids=ids).logits.float(), dim=-1)
    # position t predicts token t + 1
    return [logp[i, len(p) - 1 : len(p) + len(r) - 1] for i, (p, r) in enumerate(pairs)]


def tokens_off_greedy(model: str | Path, pairs: list[tuple[list[int], list[int]]]) -> tuple[int, int]:
    """(response tokens, how many of them have less than half the probability of their position's
    most probable token). Greedy decoding writes the most probable token everywhere: 0. Sampling
    at temperature 1 writes such a token with probability up to 1 - p_max at each position."""
    off = 0
    for (_, response), logp in zip(pairs, response_logprobs(model, pairs), strict=True):
        chosen = logp.gather(1, torch.tensor(response, dtype=torch.long)[:, None])[:, 0]
        off += int((logp.max(dim=-1).values - chosen > OFF_GREEDY_NATS).sum())
    return sum(len(r) for _, r in pairs), off


def first_differences(
    model: str | Path, triples: list[tuple[list[int], list[int], list[int]]]
) -> list[tuple[int, float, float] | None]:
    """For each (prompt ids, response a, response b) of two greedy decoders (each response with its
    end-of-sequence token when it stopped; a != b): (i, gap of a[i], gap of b[i]) at the first
    position i where they differ, a token's gap being how many nats its log-probability is below
    the position's most probable token's. None where one response is a prefix of the other (one
    ran out of tokens first: no choice between two tokens explains that)."""
    parts = []
    for _, a, b in triples:
        assert a != b
        shorter = min(len(a), len(b))
        parts.append(next((t for t in range(shorter) if a[t] != b[t]), None))
    pairs = [(p, a[: i + 1]) for (p, a, _), i in zip(triples, parts, strict=True) if i is not None]
    rows = iter(response_logprobs(model, pairs) if pairs else [])
    out = []
    for (_, a, b), i in zip(triples, parts, strict=True):
        if i is None:
            out.append(None)
            continue
        logp = next(rows)[-1]  # the distribution token i was chosen from
        top = float(logp.max())
        out.append((i, top - float(logp[a[i]]), top - float(logp[b[i]])))
    return out
