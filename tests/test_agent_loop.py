"""recipes/extensions/agent_loop.py with a fake LLM server in place of vLLM (the seam that is a GPU server in
real runs; the CPU end-to-end runs in tests/test_train_e2e.py go through the real one): the prompt
each session generates from (TA-GRPO's variants and anchoring, templates) and each request's seed
(recipes.deterministic). And two things of recipes/extensions/trainer.py around them: the order
of a step's samples and how often it looks for finished rollouts."""

import asyncio
import time

import pytest

from recipes.extensions.agent_loop import request_seed
from recipes.platforms import determinism


class FakeLLMServer:
    """The seam that is vLLM on GPUs: records the prompt ids it is asked to continue and answers
    with fixed token ids."""

    def __init__(self, answer_ids):
        self.answer_ids = answer_ids
        self.prompts = []
        self.sampling_params = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        self.sampling_params.append(dict(sampling_params))
        return TokenOutput(token_ids=list(self.answer_ids), log_probs=[-0.5] * len(self.answer_ids))


def _run_loop(tokenizer, overrides, row):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from recipes.extensions.agent_loop import PromptVariantAgentLoop
    from recipes.train import compose

    cfg = compose(["experiment=demo_cpu", *overrides])
    server = FakeLLMServer(tokenizer.encode("\\boxed{4}<|im_end|>"))
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}

    async def run():  # the loop binds the running event loop when built, as in verl's worker
        loop = PromptVariantAgentLoop(
            trainer_config=DictConfigWrap(cfg),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(cfg.data),
            hf_model_type="qwen2",
        )
        return await loop.run(sampling, **row)

    return asyncio.run(run()), server


@pytest.fixture(scope="module")
def tokenizer():
    from recipes.tools.models import tiny_tokenizer

    return tiny_tokenizer()


def _row(session, epoch=0):
    q = "What is 2 + 2?"
    row = {
        "raw_prompt": [{"role": "user", "content": q + "\nPlease box it."}],
        "extra_info": {"index": 7, "question": q},
        "index": 7,
        "data_source": "toy",
        "rephrasings": ["Compute 2 + 2.", "Calculate the value of 2 + 2.", "2 + 2 equals what number?"],
        "session_id": session,
    }
    if epoch is not None:
        row["recipes_epoch"] = epoch
    return row


@pytest.mark.parametrize("anchor", ["original", "own"])
def test_anchoring_with_fake_llm_server_swaps_only_the_prompt(tokenizer, anchor):
    """Stand-in: the LLM server (FakeLLMServer), which is vLLM on GPUs; the agent loop is real.
    rollout.n=8, N=3: session 5 answers variant 2. The generation sees q2's prompt; with
    anchor=original the output carries q0's prompt and the same response tokens."""

    def chat(text):
        messages = [{"role": "user", "content": text + "\nPlease box it."}]
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)[
            "input_ids"
        ]

    overrides = ["method=[grpo,ta_grpo]", f"recipes.ta_grpo.anchor={anchor}"]
    out, server = _run_loop(tokenizer, overrides, _row(session=5))
    assert server.prompts == [chat("Calculate the value of 2 + 2.")]
    assert out.response_ids == tokenizer.encode("\\boxed{4}<|im_end|>")
    assert out.extra_fields["variant"] == 2
    if anchor == "original":
        assert out.prompt_ids == chat("What is 2 + 2?")
        assert out.extra_fields["generation_prompt_ids"] == server.prompts[0]
        assert out.response_logprobs is None
    else:
        assert out.prompt_ids == server.prompts[0] and "generation_prompt_ids" not in out.extra_fields

    # session 1 answers the original; validation rows (no epoch) always do
    out, server = _run_loop(tokenizer, overrides, _row(session=1))
    assert server.prompts == [chat("What is 2 + 2?")] and out.prompt_ids == server.prompts[0]
    out, server = _run_loop(tokenizer, overrides, _row(session=7, epoch=None))
    assert server.prompts == [chat("What is 2 + 2?")] and "variant" not in out.extra_fields


def test_anchoring_with_templates_and_fake_llm_server_keeps_the_template(tokenizer):
    """Stand-in: the LLM server (FakeLLMServer), which is vLLM on GPUs; the agent loop, the
    templates and the tokenizer are real. Session 6 answers variant 3 in its sampled template: the
    server sees the variant in that template, the output carries the original in the same one."""
    from prompt_aug.sampling import make_sampler
    from prompt_aug.templates import prompt_ids

    overrides = [
        "method=[grpo,prompt_aug,ta_grpo]",
        "recipes.prompt_aug.sampling=per_rollout",
        "data.max_prompt_length=320",
    ]
    out, server = _run_loop(tokenizer, overrides, _row(session=6))
    template = make_sampler(sampling="per_rollout", seed=42).choose(0, 7, 6)
    assert out.extra_fields["template"] == template and out.extra_fields["variant"] == 3
    assert server.prompts == [prompt_ids(template, "2 + 2 equals what number?", tokenizer)]
    assert out.prompt_ids == prompt_ids(template, "What is 2 + 2?", tokenizer)


# ------------------------------------------------------------------ seeds (recipes.deterministic)
def test_request_seed_is_a_fixed_function_of_its_coordinates():
    """Hand-computed: blake2b-64 of repr((42, 0, 7, 3)), little-endian, top 31 bits. A change of
    this function changes every seeded run, so it is pinned."""
    import hashlib

    digest = hashlib.blake2b(b"(42, 0, 7, 3)", digest_size=8).digest()
    assert determinism.request_seed(42, 0, 7, 3) == int.from_bytes(digest, "little") >> 33
    seeds = {determinism.request_seed(42, e, r, s) for e in range(3) for r in range(20) for s in range(16)}
    assert len(seeds) == 3 * 20 * 16  # every (epoch, row, session) its own seed
    assert all(0 <= s < 2**31 for s in seeds)
    assert determinism.request_seed(43, 0, 7, 3) != determinism.request_seed(42, 0, 7, 3)


def test_training_and_validation_rows_get_their_own_seeds():
    train = {"index": 7, "session_id": 3, "recipes_epoch": 1}
    assert request_seed(42, train) == determinism.request_seed(42, 1, 7, 3)
    assert request_seed(42, {"index": 7, "session_id": 3}) == determinism.request_seed(42, "val", 7, 3)
    assert request_seed(42, train) != request_seed(42, {**train, "recipes_epoch": 0})


@pytest.mark.parametrize("deterministic", [True, False])
def test_fake_llm_server_receives_the_sessions_seed_only_when_deterministic(tokenizer, deterministic):
    """Stand-in: the LLM server (FakeLLMServer), which is vLLM on GPUs; it records the sampling
    parameters the real agent loop sends. Without any method the loop is verl's single-turn loop; recipes.deterministic adds each
    session's seed to the request's sampling parameters and nothing else."""
    overrides = ["method=[grpo]", f"recipes.deterministic={str(deterministic).lower()}"]
    seeds = []
    for session in (0, 1):
        _, server = _run_loop(tokenizer, overrides, _row(session=session, epoch=2))
        (params,) = server.sampling_params
        seeds.append(params.pop("seed", None))
        assert params == {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}
    if deterministic:
        assert seeds == [determinism.request_seed(42, 2, 7, s) for s in (0, 1)]
    else:
        assert seeds == [None, None]


def test_seeds_reach_the_fake_llm_server_under_templates_and_variants(tokenizer):
    """Stand-in: the LLM server (FakeLLMServer), which is vLLM on GPUs; it records the sampling
    parameters the real agent loop sends. With templates and variants on, the request still
    carries the session's seed."""
    overrides = ["method=[grpo,prompt_aug,ta_grpo]", "data.max_prompt_length=320"]
    _, server = _run_loop(tokenizer, overrides, _row(session=6))
    assert server.sampling_params[0]["seed"] == determinism.request_seed(42, 0, 7, 6)


def test_a_steps_samples_are_sorted_by_row_then_session_as_numbers():
    """recipes/extensions/trainer.py sorts each step's batch by TransferQueue key, whatever order the
    rollouts finished in: session 10 comes after session 9, and uids keep fetch order."""
    from recipes.extensions.trainer import key_order

    keys = ["0000001-00000_10_0", "0000000-00001_0_0", "0000001-00000_9_0", "0000000-00001_0_1"]
    assert sorted(keys, key=key_order) == [
        "0000000-00001_0_0",
        "0000000-00001_0_1",
        "0000001-00000_9_0",
        "0000001-00000_10_0",
    ]


def test_the_trainer_looks_for_finished_rollouts_every_rollout_poll_s(monkeypatch):
    """verl's sync replay buffer, as our trainer builds it from the composed config, sleeps
    recipes.rollout_poll_s between two looks at TransferQueue, not verl's 2 s (every generation and
    validation phase ended on a 2 s tick). The buffer is a plain object: no Ray here."""
    import verl.trainer.ppo.v1.replay_buffer as replay_buffer

    from recipes.extensions.trainer import RecipesTrainerSync
    from recipes.train import compose

    trainer = object.__new__(RecipesTrainerSync)  # verl's __init__ would start worker groups
    trainer.config = compose(["experiment=demo_cpu", "recipes.rollout_poll_s=0.3"])
    trainer.trainer_mode = "sync"
    buffer = trainer._build_replay_buffer()
    assert type(buffer) is replay_buffer.ReplayBuffer
    slept = []
    monkeypatch.setattr(replay_buffer.time, "sleep", slept.append)
    buffer._wait_for_next_poll("train", time.time())
    assert slept == [0.3]
