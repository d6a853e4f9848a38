"""On-policy updates without verl's separate old-log-prob pass (`recipes.skip_old_log_prob`).

Before each update verl runs the actor forward once more over the step's responses to get the
"old" log-probs of PPO's ratio (`timing_s/old_log_prob` in the metrics says what it costs a run).
When the update is on-policy, that pass gives nothing the update does not compute itself: with one
PPO epoch and one mini-batch per step, the update's only forward runs on the very weights the
pass would use, before the optimizer step. Then recipes_sync (recipes/extensions/trainer.py) skips the pass
and the policy loss takes old = current.detach(): the ratio is exactly 1 and its gradient is
A * grad log pi, as on PPO's first mini-batch (verl's recomputation gives 1 within float error).

On-policy means (`why_not` says which one fails):
  actor.ppo_epochs = 1, actor.ppo_mini_batch_size = data.train_batch_size (one optimizer step),
  no rollout correction that reweights or rejects against the old log-probs
  (algorithm.rollout_correction rollout_is / rollout_rs / bypass_mode), no KL in the reward
  (it is computed from the old log-probs before the update), no advantage estimator that reads
  the pass's outputs (actor.calculate_sum_pi_squared), no critic.

What the skipped pass also produced comes from the update's forward instead, over the same tokens:
  actor/entropy                               the update's entropy (actor.calculate_entropy is
                                              turned on; with no entropy bonus it is computed
                                              without a gradient, as the pass computed it)
  training/rollout_probs_diff_*,              rollout vs actor log-probs (verl's debug metrics,
  training/rollout_actor_probs_pearson_corr   when the rollout returns log-probs), per
                                              micro-batch, averaged over micro-batches
verl's rollout-correction metrics (rollout_corr/*) compare the rollout with the old log-probs and
are left out: there are none to compare with.
"""

from __future__ import annotations

from omegaconf import OmegaConf

# the flag recipes_sync puts on the update's batch; the loss reads it on every micro-batch
FLAG = "recipes_on_policy"
# set by recipes.train in every process of a run whose update computes the entropy only for the
# metric (on-policy, entropy_coeff 0): verl's entropy then takes no part in the backward pass
# (0 x entropy in the loss would still backpropagate through a softmax over the vocabulary)
ENTROPY_NO_GRAD = "RECIPES_ENTROPY_NO_GRAD"


def why_not(cfg) -> str | None:
    """None when every update of this config is on-policy, else the reason it is not."""

    def get(key):
        return OmegaConf.select(cfg, key)

    epochs = get("actor_rollout_ref.actor.ppo_epochs")
    if epochs != 1:
        return f"actor_rollout_ref.actor.ppo_epochs={epochs}"
    mini, bsz = get("actor_rollout_ref.actor.ppo_mini_batch_size"), get("data.train_batch_size")
    if mini != bsz:
        return f"{bsz // mini} mini-batches per step (ppo_mini_batch_size={mini}, train_batch_size={bsz})"
    rc = get("algorithm.rollout_correction") or {}
    for key in ("rollout_is", "rollout_rs"):
        if rc.get(key) is not None:
            return f"algorithm.rollout_correction.{key}={rc.get(key)}"
    if rc.get("bypass_mode"):
        return "algorithm.rollout_correction.bypass_mode=true"
    if get("actor_rollout_ref.actor.calculate_sum_pi_squared"):
        return "actor.calculate_sum_pi_squared=true (the advantage reads the old pass's outputs)"
    if get("algorithm.use_kl_in_reward"):
        return "algorithm.use_kl_in_reward=true"
    enable = get("critic.enable")  # verl's need_critic, without its warning
    if enable or (enable is None and get("algorithm.adv_estimator") == "gae"):
        return "a critic"
    return None


def active(cfg) -> bool:
    """recipes_sync skips the old-log-prob pass in this run."""
    return bool(OmegaConf.select(cfg, "recipes.skip_old_log_prob")) and why_not(cfg) is None


def environment(cfg) -> dict[str, str]:
    """What recipes.train exports for this run's processes: the flag, on or off, so that one left
    in the environment by an earlier run in the same process cannot take the entropy bonus's
    gradient away from this one."""
    no_bonus = not OmegaConf.select(cfg, "actor_rollout_ref.actor.entropy_coeff")
    return {ENTROPY_NO_GRAD: "1" if active(cfg) and no_bonus else "0"}


def patch_entropy() -> None:
    """verl's entropy functions without a gradient, in a process with ENTROPY_NO_GRAD set."""
    import os

    import torch
    from verl.utils import torch_functional as F

    if os.environ.get(ENTROPY_NO_GRAD) != "1":
        return
    for name in ("entropy_from_logits", "entropy_from_logits_with_chunking"):
        original = getattr(F, name)

        def no_grad(*args, _original=original, **kwargs):
            with torch.no_grad():
                return _original(*args, **kwargs)

        no_grad.__wrapped__ = original
        setattr(F, name, no_grad)


def patch_ppo_loss() -> None:
    """verl's PPO loss, with old = current.detach() on the micro-batches of a flagged update, plus
    the rollout-vs-actor metrics the skipped pass would have given. (verl's workers bind
    `ppo_loss` by name when they import this module: the patch runs right after it executes.)"""
    import torch
    from verl.protocol import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.utils.debug.metrics import calculate_debug_metrics
    from verl.utils.metric import AggregationType, Metric
    from verl.workers.utils import losses
    from verl.workers.utils.padding import no_padding_2_padding, response_to_nested

    original = getattr(losses.ppo_loss, "__wrapped__", losses.ppo_loss)

    def ppo_loss(config, model_output, data, dp_group=None):
        if not tu.get_non_tensor_data(data, FLAG, default=False):
            return original(config, model_output, data, dp_group=dp_group)
        log_prob = no_padding_2_padding(model_output["log_probs"], data).detach().to(torch.float32)
        data = data.copy()  # shallow: the caller's micro-batch keeps its fields
        data["old_log_probs"] = response_to_nested(log_prob, data["response_mask"])
        loss, metrics = original(config, model_output, data, dp_group=dp_group)
        if "rollout_log_probs" in data.keys():
            padded = data.select("old_log_probs", "rollout_log_probs", "response_mask").to_padded_tensor()
            padded["responses"] = padded["response_mask"]  # only its width is read
            for key, value in calculate_debug_metrics(DataProto(batch=padded)).items():
                metrics[key] = Metric(value=float(value), aggregation=AggregationType.MEAN)
        return loss, metrics

    ppo_loss.__wrapped__ = original
    losses.ppo_loss = ppo_loss


# verl's module -> the patch to apply once a process has imported it (recipes/extensions/plugins.py)
PATCHES = {"verl.workers.utils.losses": patch_ppo_loss, "verl.utils.torch_functional": patch_entropy}
