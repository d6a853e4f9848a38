"""recipes/extensions/on_policy.py: which updates are on-policy, and the PPO loss that takes the update's own
log-probs as the old ones (ratio exactly 1) in place of verl's separate old-log-prob pass. The
end-to-end runs (tests/test_train_e2e.py) train with it; here its numbers are checked against a
hand-computed value and against verl's own loss given the right old log-probs."""

import os

import pytest
import torch
from tensordict import TensorDict

from recipes.extensions import on_policy
from recipes.train import compose


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ([], None),
        (["actor_rollout_ref.actor.ppo_epochs=2"], "ppo_epochs=2"),
        (["actor_rollout_ref.actor.ppo_mini_batch_size=2"], "2 mini-batches per step"),
        (["algorithm.rollout_correction.rollout_is=token"], "rollout_correction.rollout_is=token"),
        (["algorithm.rollout_correction.rollout_rs=token"], "rollout_correction.rollout_rs=token"),
        (["algorithm.rollout_correction.bypass_mode=true"], "bypass_mode=true"),
        (["algorithm.use_kl_in_reward=true"], "use_kl_in_reward=true"),
        (["actor_rollout_ref.actor.calculate_sum_pi_squared=true"], "calculate_sum_pi_squared"),
        (["algorithm.adv_estimator=gae"], "a critic"),
    ],
)
def test_an_update_is_on_policy_only_when_nothing_needs_the_old_pass(overrides, reason):
    cfg = compose(["experiment=demo_cpu", *overrides])
    got = on_policy.why_not(cfg)
    if reason is None:
        assert got is None and on_policy.active(cfg)
    else:
        assert reason in got and not on_policy.active(cfg)


def test_the_setting_turns_the_shortcut_off():
    assert not on_policy.active(compose(["experiment=demo_cpu", "recipes.skip_old_log_prob=false"]))


def test_what_one_run_exports_does_not_carry_over_to_the_next_in_the_same_process(tiny_model):
    """recipes.train's preparation of a run on-policy without an entropy bonus exports
    RECIPES_ENTROPY_NO_GRAD=1 (verl's entropy then takes no part in the backward pass). A second
    run prepared in the same process, with a bonus and recipes.deterministic off, must get both
    flags off: an inherited entropy flag once took the bonus's gradient away from a resumed test
    run (its grad norm 0.1290 against the uninterrupted run's 0.1249, every loss metric equal)."""
    from recipes.platforms import determinism
    from recipes.train import prepare

    prepare(compose(["experiment=demo_cpu"]))  # tests/conftest.py restores os.environ afterwards
    assert os.environ[on_policy.ENTROPY_NO_GRAD] == "1" and os.environ[determinism.ENV_FLAG] == "1"
    bonus = ["actor_rollout_ref.actor.entropy_coeff=0.01", "recipes.deterministic=false"]
    cfg = compose(["experiment=demo_cpu", *bonus])
    assert on_policy.active(cfg)
    prepare(cfg)
    assert os.environ[on_policy.ENTROPY_NO_GRAD] == "0" and os.environ[determinism.ENV_FLAG] == "0"


def test_the_learning_benchmark_and_the_demos_are_on_policy():
    for experiment in ("demo_cpu", "demo_cpu_smollm2", "learning_cpu"):
        assert on_policy.why_not(compose([f"experiment={experiment}"])) is None, experiment


# ------------------------------------------------------------------------------- the loss
def nested(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def micro_batch(flag: bool, old: list[torch.Tensor], advantages: list[float], resp_lens, prompt_lens):
    from verl.utils import tensordict_utils as tu

    bs = len(resp_lens)
    td = TensorDict(
        {
            "prompts": nested([torch.ones(n, dtype=torch.long) for n in prompt_lens]),
            "responses": nested([torch.ones(n, dtype=torch.long) for n in resp_lens]),
            "response_mask": nested([torch.ones(n, dtype=torch.long) for n in resp_lens]),
            "old_log_probs": nested(old),
            "advantages": nested([torch.full((n,), a) for n, a in zip(resp_lens, advantages, strict=True)]),
        },
        batch_size=bs,
    )
    info = {"dp_size": 1, "batch_num_tokens": sum(resp_lens), "global_batch_size": bs}
    if flag:
        info[on_policy.FLAG] = True
    tu.assign_non_tensor(td, **info)
    return td


@pytest.fixture(scope="module")
def loss_setup():
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.utils import losses

    if not hasattr(losses.ppo_loss, "__wrapped__"):  # the plugin patches it when verl imports it
        on_policy.patch_ppo_loss()
    cfg = compose(["experiment=demo_cpu", "actor_rollout_ref.actor.use_kl_loss=false"])
    config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    return losses.ppo_loss, losses.ppo_loss.__wrapped__, config


def test_on_policy_loss_has_ratio_one_and_the_policy_gradient(loss_setup):
    patched, verl_loss, config = loss_setup
    torch.manual_seed(0)
    prompt_lens, resp_lens, adv = [3, 2, 4], [4, 2, 3], [1.5, -0.5, 2.0]
    seq = [p + r for p, r in zip(prompt_lens, resp_lens, strict=True)]
    values = (-torch.rand(sum(seq)) * 3).requires_grad_(True)

    def output():
        return {
            "log_probs": torch.nested.nested_tensor_from_jagged(values, offsets=torch.tensor([0, 7, 11, 18]))
        }

    # the response tokens' log-probs, as verl slices them (one to the left of each token)
    ends = torch.tensor(seq).cumsum(0).tolist()
    current = [values.detach()[e - r - 1 : e - 1] for e, r in zip(ends, resp_lens, strict=True)]
    placeholder = [torch.zeros(r) for r in resp_lens]  # what recipes_sync stores instead of the pass

    loss, metrics = patched(config, output(), micro_batch(True, placeholder, adv, resp_lens, prompt_lens))
    (grad,) = torch.autograd.grad(loss, values)
    # ratio exactly 1: nothing clipped, no KL between old and current, and the loss is the
    # seq-mean-token-mean of -A: -(1.5 - 0.5 + 2.0) / 3
    assert metrics["actor/ppo_kl"].values == [0.0] and metrics["actor/pg_clipfrac"].values == [0.0]
    assert loss.item() == pytest.approx(-1.0, abs=1e-6)
    # the gradient of each response token's log-prob: -A_i / (|o_i| * 3); prompts get none
    want = torch.zeros_like(values)
    for e, r, a in zip(ends, resp_lens, adv, strict=True):
        want[e - r - 1 : e - 1] = -a / (r * 3)
    torch.testing.assert_close(grad, want)

    # verl's own loss, given the old log-probs its pass would compute, agrees exactly
    ref_loss, _ = verl_loss(config, output(), micro_batch(False, current, adv, resp_lens, prompt_lens))
    (ref_grad,) = torch.autograd.grad(ref_loss, values)
    assert ref_loss.item() == loss.item()
    assert torch.equal(ref_grad, grad)

    # unflagged, the placeholder is used as it is: the flag is what makes the numbers right
    off_loss, _ = patched(config, output(), micro_batch(False, placeholder, adv, resp_lens, prompt_lens))
    assert abs(off_loss.item() - loss.item()) > 0.1


def test_on_policy_loss_reports_rollout_against_actor(loss_setup):
    patched, _, config = loss_setup
    prompt_lens, resp_lens, adv = [2, 2], [3, 2], [1.0, -1.0]
    lp = torch.log(torch.tensor([0.5, 0.5, 0.5, 0.9, 0.9]))
    values = torch.cat([torch.zeros(1), lp[:3], torch.zeros(2), lp[3:], torch.zeros(1)])
    values.requires_grad_(True)
    out = {"log_probs": torch.nested.nested_tensor_from_jagged(values, offsets=torch.tensor([0, 5, 9]))}
    td = micro_batch(True, [torch.zeros(3), torch.zeros(2)], adv, resp_lens, prompt_lens)
    # the rollout's probabilities: 0.4 where the actor has 0.5, 0.9 where it has 0.9
    td["rollout_log_probs"] = nested(
        [torch.log(torch.tensor([0.4, 0.4, 0.4])), torch.log(torch.tensor([0.9, 0.9]))]
    )
    _, metrics = patched(config, out, td)
    assert metrics["training/rollout_probs_diff_mean"].values[0] == pytest.approx(
        0.3 / 5
    )  # 0.1 on 3 of 5 tokens
    assert metrics["training/rollout_probs_diff_max"].values[0] == pytest.approx(0.1)
