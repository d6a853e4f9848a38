"""The transformers rollout of the bare-GPU check (recipes/platforms/hf_rollout.py), on the CPU:
its sampling restriction against a brute-force reference, its batched decoding against
transformers' own `generate` and a full forward pass, and its server (verl's `generate`, batching,
weight updates) without Ray. The same code on a GPU runs in scripts/gpu_bundle/bare_check.py; the
whole training loop through it runs in the bundle's self-test (tests/test_gpu_bundle.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from recipes.platforms.hf_rollout import HFRolloutServer, _dtype, decode, restrict


def test_restrict_keeps_top_k_and_the_nucleus_by_hand():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])  # softmax: 0.644 0.237 0.087 0.032
    inf = float("-inf")
    assert restrict(logits, 2, 1.0).tolist() == [[2.0, 1.0, inf, inf]]
    assert restrict(logits, -1, 0.5).tolist() == [[2.0, inf, inf, inf]]  # the first token alone holds 0.644
    assert restrict(logits, -1, 0.7).tolist() == [[2.0, 1.0, inf, inf]]  # 0.644 < 0.7 <= 0.881
    assert restrict(logits, -1, 0.9).tolist() == [[2.0, 1.0, 0.0, inf]]
    assert restrict(logits, -1, 1.0).tolist() == logits.tolist()
    assert restrict(torch.tensor([[0.0, 5.0]]), -1, 1e-9).tolist() == [[inf, 5.0]]  # the best always stays


def test_restrict_matches_a_brute_force_nucleus_on_random_logits():
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        logits = torch.randn(3, 17, generator=gen) * 3
        top_k = int(torch.randint(-1, 18, (1,), generator=gen))
        top_p = float(torch.rand(1, generator=gen))
        got = restrict(logits, top_k, top_p)
        for row, out in zip(logits.tolist(), got.tolist(), strict=True):
            order = sorted(range(len(row)), key=lambda i: -row[i])
            if 0 < top_k < len(row):
                order = order[:top_k]
            kept_logits = [row[i] for i in order]
            probs = torch.softmax(torch.tensor(kept_logits), -1).tolist()
            keep, mass = [], 0.0
            for i, p in zip(order, probs, strict=True):  # the smallest prefix whose mass reaches top_p
                keep.append(i)
                mass += p
                if top_p < 1.0 and mass >= top_p:
                    break
            if top_p <= 0.0:
                keep = order
            assert {i for i, v in enumerate(out) if v != float("-inf")} == set(keep)


def small_model(seed: int = 0, vocab: int = 40):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    return Qwen2ForCausalLM(config).eval()


def full_forward_logprobs(model, prompt: list[int], response: list[int], temperature: float) -> list[float]:
    """The log-probs of `response` after `prompt` from one forward pass over both, unpadded."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    scale = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / scale, -1)
    return logp.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1).tolist()


PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]  # three lengths: left padding matters


def test_greedy_decoding_equals_transformers_generate_row_by_row():
    model = small_model()
    got = decode(model, PROMPTS, [12, 12, 12], temperature=0.0, top_p=1.0, top_k=-1, stop_ids=[999], pad_id=0)
    for prompt, (ids, logps) in zip(PROMPTS, got, strict=True):
        want = model.generate(
            torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(prompt) :].tolist()
        assert ids == want
        assert logps == pytest.approx(full_forward_logprobs(model, prompt, ids, 0.0), abs=1e-4)


def test_sampled_log_probs_are_the_tempered_distributions_of_a_full_forward():
    model = small_model(seed=1)

    def sample():
        gen = torch.Generator().manual_seed(3)
        return decode(
            model, PROMPTS, [16, 9, 16], temperature=0.7, top_p=0.9, top_k=20, stop_ids=[999], pad_id=0,
            generator=gen,
        )  # fmt: skip

    got = sample()
    assert [len(ids) for ids, _ in got] == [16, 9, 16]  # each row its own limit
    for prompt, (ids, logps) in zip(PROMPTS, got, strict=True):
        # under softmax(logits / T), not the top-k/top-p restricted one: what verl's actor computes
        assert logps == pytest.approx(full_forward_logprobs(model, prompt, ids, 0.7), abs=1e-4)
    assert sample() == got  # the generator decides every draw


def test_a_row_ends_at_its_first_stop_token_and_the_rest_go_on():
    model = small_model(seed=2)

    def run(stop_ids):
        gen = torch.Generator().manual_seed(5)  # the same draws: the batch samples every row each step
        return decode(
            model,
            PROMPTS,
            [10, 10, 10],
            temperature=1.0,
            top_p=1.0,
            top_k=-1,
            stop_ids=stop_ids,
            pad_id=0,
            generator=gen,
        )

    free = run([999])
    row0 = free[0][0]
    stop = next(t for t in row0 if row0.index(t) >= 2)  # a later token of row 0 becomes a stop token
    got = run([stop])
    for (want, _), (ids, logps) in zip(free, got, strict=True):
        end = want.index(stop) + 1 if stop in want else len(want)
        assert ids == want[:end]
        assert len(logps) == len(ids)
    assert got[0][0][-1] == stop and len(got[0][0]) == row0.index(stop) + 1 < len(row0)


def test_dtype_names():
    assert _dtype("bf16") == torch.bfloat16
    assert _dtype("float32") == torch.float32
    assert _dtype(None) == torch.bfloat16
    with pytest.raises(ValueError, match="not a torch dtype"):
        _dtype("int4ish")


@pytest.fixture(scope="module")
def server(tiny_model):
    config = SimpleNamespace(prompt_length=64, response_length=12, dtype="float32", seed=0)
    return HFRolloutServer(str(tiny_model), config)


def test_the_server_answers_verls_generate_batching_concurrent_requests(server):
    from verl.workers.rollout.replica import TokenOutput

    prompts = [[1, 40, 41, 42], [1, 50], [1, 60, 61]]

    async def ask():
        greedy = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
        sampled = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False, "max_tokens": 5}
        calls = [server.generate(p, greedy, f"g{i}") for i, p in enumerate(prompts)]
        calls += [server.generate(p, sampled, f"s{i}") for i, p in enumerate(prompts)]
        return await asyncio.gather(*calls)

    out = asyncio.run(ask())
    assert all(isinstance(o, TokenOutput) for o in out)
    for prompt, o in zip(prompts, out[:3], strict=True):  # the batch of three equals each alone
        alone = decode(
            server.model,
            [prompt],
            [12],
            temperature=0.0,
            top_p=1.0,
            top_k=-1,
            stop_ids=server.stop_ids,
            pad_id=server.pad_id,
        )[0]
        assert o.token_ids == alone[0]
        assert o.log_probs == pytest.approx(alone[1], abs=1e-4)
    for o in out[3:]:
        assert o.log_probs is None and 1 <= len(o.token_ids) <= 5


def test_the_server_refuses_what_it_cannot_honour(server):
    with pytest.raises(ValueError, match="no per-request seed"):
        asyncio.run(server.generate([1, 2], {"temperature": 1.0, "seed": 7}, "r"))
    with pytest.raises(ValueError, match="leaves no room"):
        asyncio.run(server.generate(list(range(1, 80)), {"temperature": 1.0}, "r"))


def test_weights_sent_by_the_trainer_replace_the_servers(server):
    own = {k: v.clone() for k, v in server.model.state_dict().items()}
    before = server.state_checksum()
    try:
        update = {k: v + 0.5 for k, v in own.items() if k != "lm_head.weight"}
        server.update_weights(update, global_steps=3)
        assert server.global_steps == 3
        assert server.state_checksum() == pytest.approx(
            before + 0.5 * sum(v.numel() for k, v in own.items() if k != "lm_head.weight"), rel=1e-6
        )
        with pytest.raises(KeyError, match="does not have"):
            server.update_weights({**update, "extra.weight": torch.zeros(1)})
        with pytest.raises(KeyError, match="did not receive"):
            server.update_weights({k: v for k, v in update.items() if "layers.0." not in k})
    finally:
        server.update_weights({k: v for k, v in own.items() if k != "lm_head.weight"})
    assert server.state_checksum() == pytest.approx(before, rel=1e-9)
