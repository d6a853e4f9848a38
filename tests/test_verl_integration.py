"""The grader inside verl: the `math_pool` reward manager registered through the `verl.plugins`
entry point, built by verl's own `load_reward_manager`, grading a real DataProto."""

import asyncio
import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast


@pytest.mark.slow  # a fresh interpreter (or several) importing verl
def test_entry_point_registers_manager_in_a_fresh_interpreter():
    """verl swallows plugin import errors at DEBUG level: check the name really is registered."""
    code = (
        "import verl\n"
        "from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER\n"
        "assert 'math_pool' in REWARD_MANAGER, sorted(REWARD_MANAGER)\n"
        "print(REWARD_MANAGER['math_pool'].__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "recipes.extensions.reward_manager"


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE trained here in milliseconds: decode(encode(x)) == x for any text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["\\boxed{12} so the answer is 3/4 <think> </think>"] * 10, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")


def _config(response_length=64, **reward_kwargs):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"response_length": response_length}},
            "reward": {
                "reward_manager": {"source": "register", "name": "math_pool", "module": {"path": None}},
                "custom_reward_function": {
                    "path": None,
                    "name": "compute_score",
                    "reward_kwargs": reward_kwargs,
                },
                "sandbox_fusion": None,
            },
        }
    )


def _dataproto(tokenizer, responses, golds, extra_infos):
    from verl import DataProto

    prompt_len, resp_len = 4, 64
    n = len(responses)
    ids = torch.full((n, resp_len), tokenizer.pad_token_id)
    mask = torch.zeros((n, prompt_len + resp_len), dtype=torch.long)
    mask[:, :prompt_len] = 1
    for i, text in enumerate(responses):
        toks = tokenizer.encode(text)
        ids[i, : len(toks)] = torch.tensor(toks)
        mask[i, prompt_len : prompt_len + len(toks)] = 1
    return DataProto.from_dict(
        tensors={
            "prompts": torch.zeros((n, prompt_len), dtype=torch.long),
            "responses": ids,
            "attention_mask": mask,
        },
        non_tensors={
            "data_source": np.array(["math"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": g} for g in golds], dtype=object),
            "extra_info": np.array(extra_infos, dtype=object),
        },
    )


def test_load_reward_manager_and_grade(tokenizer):
    from verl.trainer.ppo.reward import load_reward_manager

    manager = load_reward_manager(_config(mode="boxed", timeout_s=2.0, num_workers=2), tokenizer)
    assert type(manager).__name__ == "PooledMathRewardManager"
    assert manager.settings.mode == "boxed"
    responses = ["so \\boxed{0.75}", "the answer is 3/4", "\\boxed{9^{9^{9^9}}}", "\\boxed{12}"]
    golds = ["3/4", "3/4", "1", "['12']"]
    data = _dataproto(tokenizer, responses, golds, [{"index": i} for i in range(4)])

    async def grade_all():  # as verl's RewardLoopWorker.compute_score_batch does
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    outputs = asyncio.run(grade_all())
    assert [o["reward_score"] for o in outputs] == [1.0, 0.0, 0.0, 1.0]  # boxed mode: phrase ignored
    infos = [o["reward_extra_info"] for o in outputs]
    assert [i["status"] for i in infos] == ["ok", "no_answer", "timeout", "ok"]
    assert infos[0]["pred"] == "0.75"
    assert len({tuple(sorted(i)) for i in infos}) == 1  # same keys for every sample: verl stacks them


def test_dapo_overlong_shaping_matches_the_papers_formula(tokenizer):
    """DAPO eq. 13: R_length = 0 if |y| <= L_max - L_cache, (L_max - L_cache - |y|) / L_cache inside
    the buffer (times the penalty factor), added to the correctness reward."""
    from verl.trainer.ppo.reward import load_reward_manager

    manager = load_reward_manager(
        _config(overlong_buffer_len=16, overlong_penalty_factor=0.5, timeout_s=2.0, num_workers=2), tokenizer
    )
    responses = ["\\boxed{12}"] + ["x" * k + " \\boxed{12}" for k in (40, 50, 56)]
    lengths = [len(tokenizer.encode(r)) for r in responses]
    assert lengths[0] < 48 < max(lengths) <= 64, lengths  # both sides of the buffer's start
    data = _dataproto(tokenizer, responses, ["12"] * 4, [{"index": i} for i in range(4)])

    async def grade_all():
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    outputs = asyncio.run(grade_all())
    for out, n in zip(outputs, lengths, strict=True):
        penalty = min((64 - 16 - n) / 16 * 0.5, 0.0)
        assert out["reward_extra_info"]["acc"] == 1.0
        assert out["reward_score"] == pytest.approx(1.0 + penalty)
        assert out["reward_extra_info"]["overlong_penalty"] == pytest.approx(penalty)


def test_overlong_buffer_longer_than_the_response_fails_clearly(tokenizer):
    from verl.trainer.ppo.reward import load_reward_manager

    with pytest.raises(ValueError, match="overlong_buffer_len=64 must be in"):  # before Ray: recipes.train
        load_reward_manager(_config(overlong_buffer_len=64), tokenizer)


def test_template_from_the_agent_loop_adds_its_format_score(tokenizer):
    """The prompt-augmentation agent loop names each session's template in its extra fields,
    which verl hands the reward manager as `tool_extra_fields`; validation sessions name none."""
    from verl.trainer.ppo.reward import load_reward_manager

    manager = load_reward_manager(_config(format_weight=0.5, timeout_s=2.0, num_workers=2), tokenizer)
    responses = ["<think> 3 </think> <answer> \\boxed{12} </answer>"] * 3 + ["<think> \\boxed{12}"]
    data = _dataproto(tokenizer, responses, ["12"] * 4, [{"index": i} for i in range(4)])
    data.non_tensor_batch["tool_extra_fields"] = np.array(
        [{"template": "deepseek-r1"}, {"template": "qwen-math"}, {}, {"template": "deepseek-r1"}],
        dtype=object,
    )

    async def grade_all():
        return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

    outputs = asyncio.run(grade_all())
    assert [o["reward_extra_info"]["format_score"] for o in outputs] == [1.0, 1.0, 0.0, 0.25]
    assert [o["reward_score"] for o in outputs] == [1.5, 1.5, 1.0, 1.125]


def test_unknown_reward_kwarg_fails_clearly(tokenizer):
    from verl.trainer.ppo.reward import load_reward_manager

    with pytest.raises(ValueError, match=r"unknown settings \['timeout'\]"):
        load_reward_manager(_config(timeout=3), tokenizer)


def test_compute_score_loads_as_verl_custom_reward_function():
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://rewards.grade",
                    "name": "compute_score",
                    "reward_kwargs": {"timeout_s": 2.0, "num_workers": 2},
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    result = fn(data_source="math", solution_str="\\boxed{\\frac{1}{2}}", ground_truth="0.5", extra_info={})
    assert result["score"] == 1.0
