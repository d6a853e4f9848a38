"""CW-GRPO (Wang et al. 2026, arXiv 2605.11538; docs/methods.md#cw-grpo): covariance-aware Gaussian
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
weights and a different set of tokens counts as extreme. The authors' TRL code computes them per
forward pass of 12 completions per device; the cw_grpo_open_rs preset matches that with fixed
micro-batches of 12 (dynamic batching, which packs by tokens, would vary the set). Padding and the
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

from recipes.methods.base import Method

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
    """(w~, c, sigma) of one loss call (module doc). At padding positions c is 0, so w is 1 and w~
    is the normalizer N / sum_valid(w) >= 1 (the loss masks them anyway)."""
    dtype = torch.promote_types(log_prob.dtype, torch.float32)  # never bf16 statistics
    m = mask.to(dtype)
    n_valid = m.sum()
    n = n_valid.clamp(min=1)
    lp = (log_prob if opts.grad_through_weights else log_prob.detach()).to(dtype)
    adv = advantages.detach().to(dtype)
    if opts.logp_per_sequence:
        lp_mean = (lp * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
    else:
        lp_mean = torch.dot(lp.reshape(-1), m.reshape(-1)) / n
    adv_mean = torch.dot(adv.reshape(-1), m.reshape(-1)) / n
    c = (lp - lp_mean).mul_((adv - adv_mean).mul_(m))  # 0 at padding
    c2 = c * c
    c_mean = c.sum() / n
    var = (c2.sum() / n - c_mean * c_mean).clamp(min=0)  # sum over valid (c - c_mean)^2 / N
    if n_valid.item() < 2 or var.item() <= _EPS**2:  # degenerate: plain advantages
        return torch.ones_like(lp), c, var.sqrt().detach()
    w = c2.mul_(-0.5 / var).exp_()  # exp(-c^2 / (2 sigma^2)); padding: exp(0) = 1
    positions = float(m.numel())
    # sum over the valid tokens = sum over all positions minus the padding's 1s
    scale = positions / w.sum() if opts.all_positions else n / (w.sum() - (positions - n))
    w_tilde = w * scale if opts.grad_through_weights else w.mul_(scale)
    return w_tilde, c, var.sqrt().detach()


SAMPLE = 8192  # values sorted for the 20% and 40% statistics (a full sort costs 2x the loss)


def _tail_means(x: torch.Tensor, count: int, sample: torch.Tensor, kept: torch.Tensor) -> list[torch.Tensor]:
    """For each p in PERCENTS, the mean of the largest p% of the `count` positive entries of the
    flat tensor `x`. `sample`: the positive entries of a strided sample of x, sorted descending;
    `kept`: every entry of x at or above some threshold (or x itself). Exact for p <= 1 when
    `kept` holds at least the top 1%, and for p = 100; 20 and 40 come from the sample."""
    if count == 0:
        return [x.new_zeros(())] * len(PERCENTS)
    k_max = min(count, max(1, round(count / 100.0)))
    top = (kept if kept.numel() >= k_max else x).topk(k_max).values.cumsum(0)
    sums = sample.cumsum(0)
    out = []
    for p in PERCENTS:
        if p >= 100:
            out.append(x.clamp(min=0).sum() / count)
        elif p <= 1 or sample.numel() == 0:
            k = min(count, max(1, round(count * p / 100.0)))
            out.append(top[k - 1] / k)
        else:
            k = min(sample.numel(), max(1, round(sample.numel() * p / 100.0)))
            out.append(sums[k - 1] / k)
    return out


def cw_metrics(
    w_tilde: torch.Tensor, c: torch.Tensor, sigma: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """The loss call's metrics (module doc). Written for speed: no gather of the valid tokens and
    one pass over c for both tails' top 1%."""
    m = mask.reshape(-1).to(w_tilde.dtype)
    n = int(m.sum())
    if n == 0:
        return {}
    w = w_tilde.detach().reshape(-1)
    flat = c.detach().float().reshape(-1)  # 0 at padding
    n_nonzero, n_sign = int(torch.count_nonzero(flat)), int(flat.sign().sum())
    n_pos, n_neg = (n_nonzero + n_sign) // 2, (n_nonzero - n_sign) // 2
    strided = flat[:: max(1, flat.numel() // SAMPLE)]
    pos = strided[strided > 0].sort(descending=True).values
    neg = (-strided[strided < 0]).sort(descending=True).values
    # one pass: every entry whose magnitude reaches the sample's 2%-largest of its sign
    kept = flat
    if pos.numel() >= 100 and neg.numel() >= 100:
        kept = flat[flat.abs() >= min(pos[pos.numel() // 50], neg[neg.numel() // 50])]
    values = [
        w.min(),  # padding holds w~ = the normalizer >= 1 >= the valid minimum
        torch.dot(w.to(m.dtype), m) / n,
        torch.count_nonzero(w < 0.5) / n,  # padding is never < 0.5
        sigma.reshape(()).to(flat.dtype),
        *_tail_means(flat, n_pos, pos, kept[kept > 0]),
        *(-v for v in _tail_means(-flat, n_neg, neg, -kept[kept < 0])),
    ]
    numbers = torch.stack([v.to(torch.float64) for v in values]).tolist()
    names = ["weight_min", "weight_mean", "frac_below_0.5", "sigma"]
    names += [f"cov_pos_top_{p:g}pct" for p in PERCENTS] + [f"cov_neg_top_{p:g}pct" for p in PERCENTS]
    return {f"cw_grpo/{k}": v for k, v in zip(names, numbers, strict=True)}


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
        cw = cw_metrics(w_tilde, c, sigma, response_mask)
        # w~ A: in place when no gradient flows through w~ (w~ is not used again)
        weighted = w_tilde * advantages if opts.grad_through_weights else w_tilde.mul_(advantages)
        loss, metrics = compute_policy_loss_vanilla(
            old_log_prob,
            log_prob,
            weighted.to(advantages.dtype),
            response_mask,
            loss_agg_mode=loss_agg_mode,
            config=config,
            rollout_is_weights=rollout_is_weights,
        )
        metrics.update(cw)
        return loss, metrics

    compute_policy_loss_cw_grpo.__name__ = f"compute_policy_loss_{opts.name.replace('-', '_')}"
    return compute_policy_loss_cw_grpo


ALL_OPTIONS = [CWOptions(*flags) for flags in itertools.product((False, True), repeat=3)]
LOSSES = {opts.name: register_policy_loss(opts.name)(make_loss(opts)) for opts in ALL_OPTIONS}


def check(cfg, _settings) -> None:
    """The actor's loss is one of the CW-GRPO losses above."""
    from omegaconf import OmegaConf

    from recipes.settings import ConfigError

    mode = OmegaConf.select(cfg, "actor_rollout_ref.actor.policy_loss.loss_mode")
    try:
        parse_name(str(mode))
    except ValueError:
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}: method cw_grpo needs a CW-GRPO loss, "
            "cw_grpo[-seqlogp][-allpos][-grad]."
        ) from None


METHOD = Method(
    "cw_grpo",
    "CW-GRPO (Wang et al. 2026, arXiv 2605.11538): covariance-aware Gaussian reweighting of token advantages",
    check=check,
)
