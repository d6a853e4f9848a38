"""CW-GRPO (Wang et al. 2026, arXiv 2605.11538; docs/methods.md#cw-grpo): covariance-aware Gaussian
reweighting of token advantages, as verl policy losses.

Per valid response token (i, t), with M the response mask and N = sum(M):
    c_it = (log pi_theta(o_it) - mean log pi) * (A_i - mean A)
    sigma = std of c over the valid tokens (population std)
    w_it  = exp(-c_it^2 / (2 sigma^2))
    w~_it = w_it * N / sum_valid(w)               (the loss keeps its expected scale)
and the loss is verl's `vanilla` PPO-clip loss with w~ * A in place of A. The options are typed
settings (`CWSettings`, `recipes.cw_grpo.*`): the paper's defaults, or the authors' code's choices
(per-sequence log-prob mean, normalization over all positions, gradient through the weights).
verl's policy-loss config takes a name and rejects keys it does not know, so each of the 8 option
sets is a loss registered under its own name, `cw_grpo[-seqlogp][-allpos][-grad]`, and `configure`
sets `actor_rollout_ref.actor.policy_loss.loss_mode` to the settings' name after composition.

Guarantees: the statistics are those of one loss call (one micro-batch on one rank); padding and the
order of samples in a call do not change the result; a degenerate call (all advantages equal, one
valid token, sigma = 0) gives w~ = 1, exactly the vanilla loss, never NaN. Metrics: actor/cw_grpo/*
(docs/metrics.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla, register_policy_loss

from recipes.methods.base import Method, decides
from recipes.settings import ConfigError, setting

BASE = "cw_grpo"
SUFFIXES = ("seqlogp", "allpos", "grad")
LOSS_KEY = "actor_rollout_ref.actor.policy_loss.loss_mode"
PERCENTS = (0.01, 1.0, 20.0, 40.0, 100.0)
_EPS = 1e-12
PAPER = "Wang et al. 2026, arXiv 2605.11538"
CODE = "the authors' code: WangCheng0116/CW-GRPO@4d46a2c src/open_r1/trl/trainer/grpo_trainer.py, use_ours"


@dataclass(frozen=True)
class CWSettings:
    logp_per_sequence: bool = setting(
        False,
        None,
        "centre each token's log-prob on its own response's mean (over that response's valid tokens) "
        "instead of the loss call's mean over all valid tokens (false: the paper)",
        f"{PAPER}; true: {CODE}",
    )
    all_positions: bool = setting(
        False,
        None,
        "normalize the weights over all B x T positions of the loss call, padding included (c = 0 "
        "there, so weight 1), instead of over the valid tokens (false: the paper)",
        f"{PAPER}; true: {CODE}",
    )
    grad_through_weights: bool = setting(
        False,
        None,
        "let the gradient flow through the weights w~ instead of treating them as constants "
        "(false: the paper)",
        f"{PAPER}; true: {CODE}",
    )

    @property
    def name(self) -> str:
        """The loss registered for these options: cw_grpo[-seqlogp][-allpos][-grad]."""
        flags = (self.logp_per_sequence, self.all_positions, self.grad_through_weights)
        return "-".join([BASE, *(s for s, on in zip(SUFFIXES, flags, strict=True) if on)])


def parse_name(name: str) -> CWSettings:
    """The options of a loss name (`cw_grpo[-seqlogp][-allpos][-grad]`); ValueError otherwise."""
    parts = name.split("-")
    rest = parts[1:]
    if parts[0] != BASE or rest != [s for s in SUFFIXES if s in rest] or len(set(rest)) != len(rest):
        raise ValueError(f"{name!r} is not a CW-GRPO loss name: cw_grpo[-seqlogp][-allpos][-grad]")
    return CWSettings(*(s in rest for s in SUFFIXES))


def cw_weights(
    log_prob: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, opts: CWSettings = CWSettings()
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


def make_loss(opts: CWSettings):
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


ALL_OPTIONS = [CWSettings(*flags) for flags in itertools.product((False, True), repeat=3)]
LOSSES = {opts.name: register_policy_loss(opts.name)(make_loss(opts)) for opts in ALL_OPTIONS}


def configure(cfg, cw: CWSettings, explicit: Mapping[str, str]) -> dict[str, Any]:
    """The loss of the settings. A CW-GRPO loss name that the preset or the command line gives
    itself, more directly than the settings (base.py `decides`), sets the settings instead: the
    string grammar before the settings, accepted for one release (docs/methods.md#cw-grpo). Any
    other loss is refused, since the method is its loss."""
    keys = [f"recipes.cw_grpo.{f.name}" for f in fields(CWSettings)]
    rule = decides(explicit, LOSS_KEY, keys)
    if rule == "settings":
        return {LOSS_KEY: cw.name}
    given = str(OmegaConf.select(cfg, LOSS_KEY))
    try:
        opts = parse_name(given)
    except ValueError:
        raise ConfigError(
            f"{LOSS_KEY}={given} ({explicit[LOSS_KEY]}): method cw_grpo needs its own loss, which it sets "
            "from recipes.cw_grpo.{logp_per_sequence,all_positions,grad_through_weights}; drop the override."
        ) from None
    if rule == "both" and opts != cw:
        raise ConfigError(
            f"{LOSS_KEY}={given} ({explicit[LOSS_KEY]}) contradicts the recipes.cw_grpo settings, which "
            f"name the loss {cw.name}: set the settings alone."
        )
    return {key: getattr(opts, key.rsplit(".", 1)[1]) for key in keys}


def check(cfg, cw: CWSettings) -> None:
    """The actor's loss is the settings' CW-GRPO loss (configure sets it)."""
    mode = OmegaConf.select(cfg, LOSS_KEY)
    if mode != cw.name:
        raise ConfigError(
            f"{LOSS_KEY}={mode}: method cw_grpo with these recipes.cw_grpo settings runs the loss {cw.name}."
        )


METHOD = Method("cw_grpo", settings=CWSettings, check=check, configure=configure)
