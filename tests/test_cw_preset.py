"""The CW-GRPO presets against the authors' public script (WangCheng0116/CW-GRPO@4d46a2c:
recipes/gaussian_1.5b.yaml and gaussian_7b.yaml, the README's launch with 3 training processes, and
their vendored TRL 0.15.2): the batch, the KL term and the loss it sits in, the learning-rate at
every step, the system prompt and format reward, the lengths and the evaluation protocol. The
table beside it is docs/methods.md's CW-GRPO fidelity table."""

import math

import pytest
import torch

from recipes.train import compose

PRESETS = (
    "cw_grpo_open_rs",
    "cw_grpo_open_rs_7b",
    "cw_grpo_baseline_grpo_open_rs",
    "cw_grpo_baseline_clip_cov_open_rs",
)
# recipes/gaussian_1.5b.yaml's system_prompt as YAML reads it: the double-quoted "\\boxed{{}}" is
# the text \boxed{{}}, doubled braces and all, since nothing formats it
AUTHORS_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves "
    "it. The assistant first thinks about the reasoning process in the mind and then provides the "
    "user with the answer, and put your final answer within \\boxed{{}} . The reasoning process and "
    "answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think> <answer> answer here </answer>. Note that respond by "
    "English, NOT use other languages."
)


@pytest.fixture(scope="module")
def cfgs():
    return {name: compose([f"experiment={name}"]) for name in PRESETS}


def test_a_step_is_12_questions_x_12_responses_in_one_optimizer_step(cfgs):
    # theirs: per_device_train_batch_size 12 x gradient_accumulation_steps 4 x 3 processes = 144
    # completions, num_generations 12, one optimizer step (TRL 0.15 has no PPO epochs)
    for name, cfg in cfgs.items():
        actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
        assert (cfg.data.train_batch_size, rollout.n, actor.ppo_mini_batch_size) == (12, 12, 12), name
        assert cfg.data.train_batch_size * rollout.n == 12 * 4 * 3 and actor.ppo_epochs == 1, name
        assert cfg.data.seed == 2025, name  # their seed: the same torch.randperm of the rows
        assert cfg.trainer.total_training_steps == 100, name


def test_the_kl_term_is_trls_k3_at_its_default_004_inside_a_seq_mean_token_mean_loss(cfgs):
    from verl.trainer.ppo.core_algos import agg_loss, kl_penalty

    for name, cfg in cfgs.items():
        actor = cfg.actor_rollout_ref.actor
        assert actor.use_kl_loss and actor.kl_loss_coef == 0.04, name  # GRPOConfig.beta's default
        assert actor.kl_loss_type == "low_var_kl" and actor.loss_agg_mode == "seq-mean-token-mean", name
        assert not cfg.algorithm.use_kl_in_reward, name
    g = torch.Generator().manual_seed(0)
    logp, ref = -2 * torch.rand(12, 40, generator=g), -2 * torch.rand(12, 40, generator=g)
    # TRL 0.15.2 grpo_trainer.compute_loss: exp(ref - logp) - (ref - logp) - 1
    trl_kl = torch.exp(ref - logp) - (ref - logp) - 1
    verl_kl = kl_penalty(logprob=logp, ref_logprob=ref, kl_penalty="low_var_kl")
    torch.testing.assert_close(verl_kl, trl_kl)
    # the one difference: verl clamps a token's k3 at 10 (TRL's would be e^3 - 4 = 16.1 here)
    far = kl_penalty(logprob=torch.tensor([-4.0]), ref_logprob=torch.tensor([-1.0]), kl_penalty="low_var_kl")
    assert far.item() == 10.0
    # TRL: each response's token mean, then the mean over the device batch; the mean over the 144
    # follows from the accumulation and the data-parallel average. verl divides every micro-batch's
    # sum by the mini-batch's response count, so a split gives the same loss.
    mask = (torch.arange(40) < torch.randint(5, 41, (12, 1), generator=g)).float()
    trl = ((trl_kl * mask).sum(1) / mask.sum(1)).mean()
    mode = cfgs["cw_grpo_open_rs"].actor_rollout_ref.actor.loss_agg_mode
    whole = agg_loss(trl_kl, mask, mode, global_batch_size=12)
    split = sum(agg_loss(trl_kl[i : i + 4], mask[i : i + 4], mode, global_batch_size=12) for i in (0, 4, 8))
    torch.testing.assert_close(whole, trl)
    torch.testing.assert_close(split, trl)


def _verl_lrs(cfg, steps: int) -> list[float]:
    """The lr of each of `steps` updates as verl's FSDP engine schedules it from this config: its
    `_build_lr_scheduler` takes lr_warmup_steps when > 0, else int(ratio x total), with the total
    injected from trainer.total_training_steps (one update a step here)."""
    from verl.utils.torch_functional import get_cosine_schedule_with_warmup

    optim = cfg.actor_rollout_ref.actor.optim
    total = int(cfg.trainer.total_training_steps)
    warmup = optim.lr_warmup_steps if optim.lr_warmup_steps > 0 else int(optim.lr_warmup_steps_ratio * total)
    assert optim.lr_scheduler_type == "cosine" and optim.zero_indexed_step
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=optim.lr)
    sched = get_cosine_schedule_with_warmup(opt, warmup, total, optim.min_lr_ratio, optim.num_cycles)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def _authors_lrs(max_steps: int, steps: int) -> list[float]:
    """transformers 4.49's cosine_with_min_lr (the authors' pin; the formula is unchanged in the
    installed version), min_lr_rate 0.1, warm-up ceil(warmup_ratio 0.1 x max_steps), lr 1e-6."""
    from transformers.optimization import get_cosine_with_min_lr_schedule_with_warmup

    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1e-6)
    sched = get_cosine_with_min_lr_schedule_with_warmup(
        opt, math.ceil(0.1 * max_steps), max_steps, min_lr_rate=0.1
    )
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


@pytest.mark.parametrize(("name", "max_steps"), [("cw_grpo_open_rs", 300), ("cw_grpo_open_rs_7b", 150)])
def test_every_steps_lr_is_the_authors_over_their_max_steps_horizon(cfgs, name, max_steps):
    cfg = cfgs[name]
    optim = cfg.actor_rollout_ref.actor.optim
    assert (optim.lr, optim.min_lr_ratio, optim.weight_decay) == (1e-6, 0.1, 0.0)
    ours, theirs = _verl_lrs(cfg, 100), _authors_lrs(max_steps, 100)
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-18)
    # warm-up from 0 over a tenth of their horizon; at step 99 still 0.86 (1.5B) or 0.38 (7B) of the
    # peak, where a cosine over our own 100 steps would be at its end
    assert ours[0] == 0 and ours[max_steps // 10] == pytest.approx(1e-6) and ours[99] > 0.3e-6


def test_the_full_300_step_run_the_yaml_names_is_the_authors_schedule():
    cfg = compose(
        [
            "experiment=cw_grpo_open_rs",
            "trainer.total_training_steps=300",
            "actor_rollout_ref.actor.optim.num_cycles=0.5",
        ]
    )
    assert _verl_lrs(cfg, 300) == pytest.approx(_authors_lrs(300, 300), rel=1e-9, abs=1e-18)


def test_every_prompt_is_the_authors_system_prompt_and_format_counts_as_much_as_accuracy(cfgs):
    from prompt_aug import templates as T
    from recipes.methods import registry
    from recipes.methods.base import Prompt
    from recipes.methods.prompt_aug import PromptAugPrompts
    from rewards.training import training_reward

    t = T.get("cw-grpo")
    assert (t.system, t.user_suffix, t.assistant_prefix) == (AUTHORS_SYSTEM_PROMPT, "", "")
    assert T.render_chatml(t, "What is 1+1?") == (
        f"<|im_start|>system\n{AUTHORS_SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n"
    )
    # not one of prompt augmentation's 13: "all" and the deepseek family never draw it
    assert "cw-grpo" not in T.select("all") and "cw-grpo" not in T.select(["deepseek"])
    # their format_reward: 1 when the completion holds "\n</think>\n" exactly once
    assert T.format_score("cw-grpo", "2 apples\n</think>\n<answer>\\boxed{2}</answer>") == 1.0
    assert T.format_score("cw-grpo", "a\n</think>\nb\n</think>\n") == 0.0
    assert T.format_score("cw-grpo", "a</think><answer>2</answer>") == 0.0
    row = {"index": 3, "session_id": 7, "recipes_epoch": 0, "extra_info": {"question": "Q?"}}
    for name, cfg in cfgs.items():
        assert cfg.recipes.methods.get("prompt_aug"), name
        hook = PromptAugPrompts(registry.settings(cfg, "prompt_aug"))
        train, val = Prompt("Q?", "Q?"), Prompt("Q?", "Q?")
        hook(train, row, True, 12)
        hook(val, {k: v for k, v in row.items() if k != "recipes_epoch"}, False, 1)
        assert train.template == train.extra["template"] == val.template == "cw-grpo", name
        weight = cfg.reward.custom_reward_function.reward_kwargs.format_weight
        # reward_weights [1.0, 1.0] for the 1.5B runs; the 7B's reward_funcs are [accuracy] only
        assert weight == (0.0 if name.endswith("_7b") else 1.0), name
        assert training_reward({"acc": 1.0}, 1.0, 0.0, weight)["score"] == (1.0 if weight == 0 else 2.0)


def test_losses_lengths_and_evaluation_protocol(cfgs):
    losses = {name: cfg.actor_rollout_ref.actor.policy_loss.loss_mode for name, cfg in cfgs.items()}
    assert losses == {
        "cw_grpo_open_rs": "cw_grpo-seqlogp-allpos-grad",  # their use_ours code
        "cw_grpo_open_rs_7b": "cw_grpo-seqlogp-allpos-grad",
        "cw_grpo_baseline_grpo_open_rs": "vanilla",
        "cw_grpo_baseline_clip_cov_open_rs": "clip_cov",
    }
    for name, cfg in cfgs.items():
        rollout = cfg.actor_rollout_ref.rollout
        # their vllm_max_model_len 4096: prompt + completion at most 4,096 tokens
        assert (rollout.max_model_len, cfg.data.max_prompt_length, rollout.temperature) == (4096, 512, 0.7)
        assert cfg.data.max_response_length == (3584 if name.endswith("_7b") else 4096), name
        # the 7B's context is 4,096 tokens: its authors evaluated within it (recipes/protocols.py)
        assert cfg.recipes.eval_protocol == ("cw_grpo_7b" if name.endswith("_7b") else "cw_grpo"), name
