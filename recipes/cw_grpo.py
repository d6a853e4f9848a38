"""CW-GRPO (Wang et al. 2026, arXiv 2605.11538; METHODS.md section 4): covariance-aware Gaussian
reweighting of token advantages, as verl policy losses.

Per valid response token (i, t), with M the response mask and N = sum(M):
    c_it = (log pi_theta(o_it) - mean log pi) * (A_i - mean A)
    sigma = std of c over the valid tokens (population std)
    w_it  = exp(-c_it^2 / (2 sigma^2))
    w~_it = w_it * N / sum_valid(w)               (the loss keeps its expected scale)
and the loss is verl's `vanilla` PPO-clip loss (clipping, dual-clip, loss aggregation, rollout
importance weights unchanged; the KL term is added by verl outside the policy loss) with w~ * A in
place of A. The paper's defaults: both means over the valid tokens of the batch, normalization
over the valid tokens, weights constants (no gradient through them).

Options (the authors' public TRL code), chosen by the loss NAME so that they reach verl's workers
through `actor_rollout_ref.actor.policy_loss.loss_mode`, a key verl already ships to them (its
PolicyLossConfig rejects unknown keys). The name is `cw_grpo` followed by any of these suffixes,
in this order:
    -seqlogp   the log-prob is centred per sequence (over that sequence's valid tokens)
    -allpos    normalization over all B x T positions including padding; a padding position
               counts with c = 0, i.e. weight 1: w~ = w * B*T / (sum_valid(w) + #padding)
    -grad      the weights are not detached: the gradient also flows through w~ (via log pi)
e.g. `cw_grpo` (the paper) or `cw_grpo-seqlogp-allpos-grad` (the authors' code). All 8 are
registered.

Statistics are those of ONE loss call. verl calls the policy loss once per micro-batch
(`ppo_micro_batch_size_per_gpu`, or the token budget with `use_dynamic_bsz`), per data-parallel
rank: the means and sigma are micro-batch statistics, so a smaller micro-batch gives noisier
weights (the paper computes them over its device batch of 12 x 4 responses). Padding and the
order of samples within a call do not change the result (tested).

Degenerate calls (all advantages equal, a single valid token, sigma = 0) give w~ = 1, i.e.
exactly the vanilla loss, never NaN.

Metrics (verl averages them over micro-batches and logs them as actor/cw_grpo/*): weight_min,
weight_mean, frac_below_0.5 (share of valid tokens with w~ < 0.5), sigma, and the covariance
statistics of the paper's Table 1: cov_pos_top_<p>pct and cov_neg_top_<p>pct, the
mean of the largest p% of the positive (most negative p% of the negative) c values, p in 0.01, 1,
20, 40, 100 (our reading of Table 1: its 100% row, 0.06, can only be a mean). 0.01%, 1% and 100%
are exact; 20% and 40% come from an evenly strided sample of at most 8,192 values, because a full
sort per call would cost twice the loss itself. Policy entropy is verl's actor/entropy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch
from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla, register_policy_loss

BASE = "cw_grpo"
SUFFIXES = ("seqlogp", "allpos", "grad")
PERCENTS = (0.01, 1.0, 20.0, 40.0, 100.0)
_EPS = 1e-12


@dataclass(frozen=True)
class CWOptions:
    logp_per_sequence: bool = False
    all_positions: bool = False
    grad_through_weights: bool = False

    @property
    def name(self) -> str:
        flags = (self.logp_per_sequence, self.all_positions, self.grad_through_weights)
        return "-".join([BASE, *(s for s, on in zip(SUFFIXES, flags, strict=True) if on)])


def parse_name(name: str) -> CWOptions:
    """The options of a loss name (`cw_grpo[-seqlogp][-allpos][-grad]`); ValueError otherwise."""
    parts = name.split("-")
    rest = parts[1:]
    if parts[0] != BASE or rest != [s for s in SUFFIXES if s in rest] or len(set(rest)) != len(rest):
        raise ValueError(f"{name!r} is not a CW-GRPO loss name: cw_grpo[-seqlogp][-allpos][-grad]")
    return CWOptions(*(s in rest for s in SUFFIXES))


def cw_weights(
    log_prob: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, opts: CWOptions = CWOptions()
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(w~, c, sigma) of one loss call (module doc). At padding positions w~ is 1 and c is 0;
    the loss masks them anyway."""
    dtype = torch.promote_types(log_prob.dtype, torch.float32)  # never bf16 statistics
    m = mask.to(dtype)
    n_valid = m.sum()
    lp = (log_prob if opts.grad_through_weights else log_prob.detach()).to(dtype)
    adv = advantages.detach().to(dtype)
    if opts.logp_per_sequence:
        per_seq = m.sum(-1, keepdim=True)
        lp_mean = (lp * m).sum(-1, keepdim=True) / per_seq.clamp(min=1)
    else:
        lp_mean = (lp * m).sum() / n_valid.clamp(min=1)
    adv_mean = (adv * m).sum() / n_valid.clamp(min=1)
    c = (lp - lp_mean) * (adv - adv_mean) * m
    c_mean = c.sum() / n_valid.clamp(min=1)
    var = (((c - c_mean) * m) ** 2).sum() / n_valid.clamp(min=1)
    sigma = var.clamp(min=0).sqrt()
    if n_valid < 2 or sigma.item() <= _EPS:  # degenerate: plain advantages
        return torch.ones_like(lp), c, sigma.detach()
    w = torch.exp(-(c**2) / (2 * sigma**2))
    if opts.all_positions:
        total = torch.tensor(float(m.numel()), dtype=lp.dtype, device=lp.device)
        w_tilde = w * total / ((w * m).sum() + (total - n_valid))
    else:
        w_tilde = w * n_valid / (w * m).sum()
    w_tilde = torch.where(m > 0, w_tilde, torch.ones_like(w_tilde))
    return w_tilde, c, sigma.detach()


SAMPLE = 8192  # values sorted for the 20% and 40% statistics (a full sort costs 2x the loss)


def _top_means(values: torch.Tensor) -> list[float]:
    """For each p in PERCENTS, the mean of the largest p% of `values` (at least one value). Exact
    for p <= 1 (topk) and p = 100; for 20 and 40 computed on an evenly strided sample of at most
    SAMPLE values."""
    n = values.numel()
    if n == 0:
        return [0.0] * len(PERCENTS)
    out = []
    sample = values[:: max(1, n // SAMPLE)].sort(descending=True).values.double().cumsum(0)
    for p in PERCENTS:
        if p >= 100:
            out.append(values.double().mean().item())
        elif p <= 1:
            k = min(n, max(1, round(n * p / 100.0)))
            out.append(values.topk(k).values.double().mean().item())
        else:
            k = min(sample.numel(), max(1, round(sample.numel() * p / 100.0)))
            out.append((sample[k - 1] / k).item())
    return out


def cw_metrics(
    w_tilde: torch.Tensor, c: torch.Tensor, sigma: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    valid = mask > 0
    w = w_tilde.detach()[valid]
    cv = c.detach()[valid].float()
    out = {
        "cw_grpo/weight_min": w.min().item() if w.numel() else 1.0,
        "cw_grpo/weight_mean": w.mean().item() if w.numel() else 1.0,
        "cw_grpo/frac_below_0.5": (w < 0.5).float().mean().item() if w.numel() else 0.0,
        "cw_grpo/sigma": float(sigma),
    }
    for p, pos, neg in zip(PERCENTS, _top_means(cv[cv > 0]), _top_means(-cv[cv < 0]), strict=True):
        out[f"cw_grpo/cov_pos_top_{p:g}pct"] = pos
        out[f"cw_grpo/cov_neg_top_{p:g}pct"] = -neg
    return out


def make_loss(opts: CWOptions):
    def compute_policy_loss_cw_grpo(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        w_tilde, c, sigma = cw_weights(log_prob, advantages, response_mask, opts)
        loss, metrics = compute_policy_loss_vanilla(
            old_log_prob,
            log_prob,
            (w_tilde * advantages).to(advantages.dtype),
            response_mask,
            loss_agg_mode=loss_agg_mode,
            config=config,
            rollout_is_weights=rollout_is_weights,
        )
        metrics.update(cw_metrics(w_tilde, c, sigma, response_mask))
        return loss, metrics

    compute_policy_loss_cw_grpo.__name__ = f"compute_policy_loss_{opts.name.replace('-', '_')}"
    return compute_policy_loss_cw_grpo


ALL_OPTIONS = [CWOptions(*flags) for flags in itertools.product((False, True), repeat=3)]
LOSSES = {opts.name: register_policy_loss(opts.name)(make_loss(opts)) for opts in ALL_OPTIONS}
