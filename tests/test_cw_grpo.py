"""CW-GRPO's loss (recipes/methods/cw_grpo.py): a hand-computed example, a plain-Python reference on random
inputs for all 8 option sets, gradients with and without detached weights, invariance to padding
and sample order, degenerate batches, metrics, and registration with verl. Every loss call gets
verl's own actor config, built from the CW-GRPO preset as verl builds it for a run."""

import math
import random

import pytest
import torch

from recipes.methods import cw_grpo
from recipes.methods.cw_grpo import ALL_OPTIONS, CWSettings, cw_metrics, cw_weights, parse_name


@pytest.fixture(scope="module")
def config():
    """verl's FSDPActorConfig for cw_grpo_open_rs: the preset composed, then verl's own
    omega_conf_to_dataclass (as tests/test_on_policy.py builds it), the object the loss receives."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import ActorConfig

    from recipes.train import compose

    actor = omega_conf_to_dataclass(compose(["experiment=cw_grpo_open_rs"]).actor_rollout_ref.actor)
    assert isinstance(actor, ActorConfig)
    return actor


def vanilla(old, new, adv, mask, config, loss_agg_mode="token-mean"):
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    return compute_policy_loss_vanilla(old, new, adv, mask, loss_agg_mode=loss_agg_mode, config=config)[0]


# ------------------------------------------------------------------------------- by hand
def test_hand_computed_example(config):
    log_prob = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # valid log-probs -1 -2 -3 -1 -1: mean -1.6; valid advantages 1 1 1 -1 -1: mean 0.2
    c = [0.6 * 0.8, -0.4 * 0.8, -1.4 * 0.8, 0.6 * -1.2, 0.6 * -1.2]  # 0.48 -0.32 -1.12 -0.72 -0.72
    # mean of c: -0.48; population variance: (0.96^2 + 0.16^2 + 0.64^2 + 2 * 0.24^2) / 5 = 0.2944
    w = [math.exp(-(x**2) / (2 * 0.2944)) for x in c]
    w_tilde = [x * 5 / sum(w) for x in w]
    got, got_c, sigma = cw_weights(log_prob, adv, mask)
    assert sigma.item() == pytest.approx(math.sqrt(0.2944))
    assert got_c[mask > 0].tolist() == pytest.approx(c)
    assert got[mask > 0].tolist() == pytest.approx(w_tilde)
    assert got[1, 2].item() == pytest.approx(5 / sum(w))  # padding: c = 0, w = 1, times the normalizer
    assert w_tilde == pytest.approx([1.3718, 1.7049, 0.2410, 0.8412, 0.8412], abs=1e-4)

    metrics = cw_metrics(got, got_c, sigma, mask)
    assert metrics["cw_grpo/weight_min"] == pytest.approx(min(w_tilde))
    assert metrics["cw_grpo/weight_mean"] == pytest.approx(1.0)
    assert metrics["cw_grpo/frac_below_0.5"] == pytest.approx(0.2)
    assert metrics["cw_grpo/cov_pos_top_0.01pct"] == pytest.approx(0.48)
    assert metrics["cw_grpo/cov_pos_top_100pct"] == pytest.approx(0.48)
    assert metrics["cw_grpo/cov_neg_top_1pct"] == pytest.approx(-1.12)  # 4 negatives: k = 1
    assert metrics["cw_grpo/cov_neg_top_40pct"] == pytest.approx(-0.92)  # k = 2: (-1.12 - 0.72) / 2
    assert metrics["cw_grpo/cov_neg_top_100pct"] == pytest.approx(-0.72)  # (-0.32 - 1.12 - 1.44) / 4

    # the loss is the vanilla loss with w~ A in place of A, under the aggregation verl passes: the
    # default token mean, and the preset's mean over sequences of their token means
    old = log_prob - 0.05
    loss, _ = cw_grpo.LOSSES["cw_grpo"](old, log_prob, adv, mask, config=config)
    assert loss.item() == pytest.approx(vanilla(old, log_prob, got * adv, mask, config).item())
    assert config.loss_agg_mode != "token-mean"  # the preset's: seq-mean-token-mean
    loss, _ = cw_grpo.LOSSES["cw_grpo"](
        old, log_prob, adv, mask, loss_agg_mode=config.loss_agg_mode, config=config
    )
    expect = vanilla(old, log_prob, got * adv, mask, config, config.loss_agg_mode).item()
    assert loss.item() == pytest.approx(expect)


# ----------------------------------------------------------------------- plain reference
def reference_weights(log_prob, adv, mask, opts: CWSettings):
    """The module doc's equations with Python lists and loops."""
    rows = [
        [(log_prob[i][t], adv[i][t]) for t in range(len(mask[i])) if mask[i][t]] for i in range(len(mask))
    ]
    valid = [x for row in rows for x in row]
    n = len(valid)
    mean_lp_batch = sum(lp for lp, _ in valid) / n
    mean_a = sum(a for _, a in valid) / n
    cs = []
    for row in rows:
        mean_lp = (sum(lp for lp, _ in row) / len(row)) if opts.logp_per_sequence and row else mean_lp_batch
        cs.append([(lp - mean_lp) * (a - mean_a) for lp, a in row])
    flat = [c for row in cs for c in row]
    mu = sum(flat) / n
    sigma = math.sqrt(sum((c - mu) ** 2 for c in flat) / n)
    if n < 2 or sigma <= 1e-12:
        return [[1.0] * len(row) for row in cs]
    ws = [[math.exp(-(c**2) / (2 * sigma**2)) for c in row] for row in cs]
    total_w = sum(w for row in ws for w in row)
    if opts.all_positions:
        positions = len(mask) * len(mask[0])
        scale = positions / (total_w + positions - n)
    else:
        scale = n / total_w
    return [[w * scale for w in row] for row in ws]


def random_batch(seed, b=6, t=12):
    rng = random.Random(seed)
    lengths = [rng.randint(1, t) for _ in range(b)]
    mask = torch.tensor([[1 if j < n else 0 for j in range(t)] for n in lengths])
    log_prob = torch.tensor(
        [[-rng.expovariate(1.0) for _ in range(t)] for _ in range(b)], dtype=torch.float64
    )
    adv = torch.tensor([[a] * t for a in (rng.gauss(0, 1) for _ in range(b))], dtype=torch.float64)
    return log_prob, adv, mask


@pytest.mark.parametrize("opts", ALL_OPTIONS, ids=lambda o: o.name)
@pytest.mark.parametrize("seed", range(4))
def test_matches_the_reference_on_random_inputs(opts, seed, config):
    log_prob, adv, mask = random_batch(seed)
    got, _, _ = cw_weights(log_prob, adv, mask, opts)
    expect = reference_weights(log_prob.tolist(), adv.tolist(), mask.tolist(), opts)
    for i in range(len(mask)):
        n = int(mask[i].sum())
        assert got[i, :n].tolist() == pytest.approx(expect[i], rel=1e-9)
    old = log_prob + 0.1 * torch.randn_like(log_prob)
    loss, metrics = cw_grpo.LOSSES[opts.name](old, log_prob, adv, mask, config=config)
    ref_w = torch.ones_like(log_prob)
    for i in range(len(mask)):
        ref_w[i, : int(mask[i].sum())] = torch.tensor(expect[i], dtype=torch.float64)
    assert loss.item() == pytest.approx(vanilla(old, log_prob, ref_w * adv, mask, config).item(), rel=1e-9)
    assert math.isfinite(metrics["cw_grpo/weight_min"])


# ------------------------------------------------------------------------------ gradients
def test_detached_weights_give_the_vanilla_gradient_at_fixed_weights_and_grad_option_differs(config):
    log_prob, adv, mask = random_batch(11)
    old = (log_prob + 0.05 * torch.randn_like(log_prob)).detach()

    def grad_of(loss_name):
        lp = log_prob.clone().requires_grad_(True)
        loss, _ = cw_grpo.LOSSES[loss_name](old, lp, adv, mask, config=config)
        loss.backward()
        return lp.grad

    w, _, _ = cw_weights(log_prob, adv, mask)
    lp = log_prob.clone().requires_grad_(True)
    vanilla(old, lp, w.detach() * adv, mask, config).backward()
    detached = grad_of("cw_grpo")
    assert torch.allclose(detached, lp.grad, atol=1e-12)

    through = grad_of("cw_grpo-grad")
    # the same loss value, but d(loss)/d(log pi) also has the path through w~(log pi)
    assert not torch.allclose(through, detached, atol=1e-6)
    # and that path is the derivative of the reference weights: check one coordinate numerically
    i, t, h = 0, 0, 1e-6
    plus, minus = log_prob.clone(), log_prob.clone()
    plus[i, t] += h
    minus[i, t] -= h
    f = lambda x: cw_grpo.LOSSES["cw_grpo-grad"](old, x, adv, mask, config=config)[0].item()  # noqa: E731
    assert through[i, t].item() == pytest.approx((f(plus) - f(minus)) / (2 * h), rel=1e-4, abs=1e-8)


# ------------------------------------------------------------------------------ invariances
@pytest.mark.parametrize("opts", [CWSettings(), CWSettings(logp_per_sequence=True)], ids=lambda o: o.name)
def test_padding_and_sample_order_do_not_change_the_result(opts, config):
    log_prob, adv, mask = random_batch(5)
    old = log_prob - 0.1
    name = opts.name
    loss, _ = cw_grpo.LOSSES[name](old, log_prob, adv, mask, config=config)
    w, _, _ = cw_weights(log_prob, adv, mask, opts)

    pad = 7  # more padding columns, filled with garbage
    wide = [
        torch.cat([x, torch.full((x.shape[0], pad), v, dtype=x.dtype)], 1)
        for x, v in ((log_prob, -50.0), (adv, 9.0))
    ]
    wide_mask = torch.cat([mask, torch.zeros(mask.shape[0], pad, dtype=mask.dtype)], 1)
    loss_wide, _ = cw_grpo.LOSSES[name](
        torch.cat([old, torch.zeros_like(old[:, :pad])], 1), *wide, wide_mask, config=config
    )
    assert loss_wide.item() == pytest.approx(loss.item(), rel=1e-12)
    w_wide, _, _ = cw_weights(*wide, wide_mask, opts)
    assert torch.allclose(w_wide[:, : mask.shape[1]][mask > 0], w[mask > 0])

    perm = torch.randperm(log_prob.shape[0], generator=torch.Generator().manual_seed(0))
    loss_perm, _ = cw_grpo.LOSSES[name](old[perm], log_prob[perm], adv[perm], mask[perm], config=config)
    assert loss_perm.item() == pytest.approx(loss.item(), rel=1e-12)


def test_all_positions_option_does_depend_on_padding():
    log_prob, adv, mask = random_batch(5)
    opts = CWSettings(all_positions=True)
    w, _, _ = cw_weights(log_prob, adv, mask, opts)
    wide_mask = torch.cat([mask, torch.zeros_like(mask[:, :5])], 1)
    w_wide, _, _ = cw_weights(
        torch.cat([log_prob, log_prob[:, :5]], 1), torch.cat([adv, adv[:, :5]], 1), wide_mask, opts
    )
    assert not torch.allclose(w_wide[:, : mask.shape[1]][mask > 0], w[mask > 0])


# ------------------------------------------------------------------------------ degenerate
@pytest.mark.parametrize("opts", ALL_OPTIONS, ids=lambda o: o.name)
def test_degenerate_batches_give_the_vanilla_loss(opts, config):
    log_prob, _, mask = random_batch(3)
    old = log_prob - 0.2
    cases = {
        "equal advantages": (log_prob, torch.full_like(log_prob, 0.7), mask),
        "single valid token": (
            log_prob,
            torch.randn_like(log_prob),
            torch.zeros_like(mask).index_put_((torch.tensor([0]), torch.tensor([0])), torch.tensor(1)),
        ),
        "constant log-probs (sigma 0)": (torch.full_like(log_prob, -1.0), torch.randn_like(log_prob), mask),
    }
    for what, (lp, adv, m) in cases.items():
        loss, metrics = cw_grpo.LOSSES[opts.name](old, lp, adv, m, config=config)
        assert math.isfinite(loss.item()), what
        assert loss.item() == pytest.approx(vanilla(old, lp, adv, m, config).item(), rel=1e-12), what
        assert all(math.isfinite(v) for v in metrics.values()), (what, metrics)
        assert metrics["cw_grpo/weight_min"] == 1.0, what


# ------------------------------------------------------------------------------ names
def test_names_are_registered_with_verl_and_parsed():
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    assert len({o.name for o in ALL_OPTIONS}) == 8
    for opts in ALL_OPTIONS:
        assert parse_name(opts.name) == opts
        assert get_policy_loss_fn(opts.name) is cw_grpo.LOSSES[opts.name]
    assert parse_name("cw_grpo-seqlogp-allpos-grad") == CWSettings(True, True, True)
    # the declaration the plugin wires them from names exactly these (recipes/methods/manifest.py)
    from recipes.methods.manifest import DECLARED

    assert set(DECLARED["cw_grpo"].registers["policy_loss"]) == set(cw_grpo.LOSSES)
    for bad in ("cw_grpo-grad-seqlogp", "cw_grpo-grad-grad", "cw_grpo-fast", "cwgrpo"):
        with pytest.raises(ValueError, match="not a CW-GRPO loss name"):
            parse_name(bad)


def test_bf16_inputs_get_float32_statistics():
    """verl hands the loss bf16 log-probs on some setups; the weights must still average 1."""
    log_prob, adv, mask = random_batch(8, b=16, t=64)
    w, _, _ = cw_weights(log_prob.bfloat16(), adv.bfloat16(), mask)
    assert w.dtype == torch.float32
    assert w[mask > 0].mean().item() == pytest.approx(1.0, abs=1e-6)


def test_covariance_statistics_on_a_large_batch_against_a_full_sort():
    """The 0.01%, 1% and 100% means are exact (the top-k prefilter must not change them); the 20%
    and 40% ones come from a strided sample and are close."""
    g = torch.Generator().manual_seed(0)
    c = torch.randn(64, 4096, generator=g) ** 3  # heavy tails, as the paper's Table 1
    c[:, 3000:] = 0.0  # padding
    mask = torch.zeros_like(c)
    mask[:, :3000] = 1
    metrics = cw_metrics(torch.ones_like(c), c, torch.tensor(1.0), mask)
    for sign, name in ((1, "pos"), (-1, "neg")):
        values = (sign * c[mask > 0]).clamp(min=0)
        values = values[values > 0].sort(descending=True).values.double()
        for p in (0.01, 1.0, 100.0):
            k = max(1, round(values.numel() * p / 100))
            assert metrics[f"cw_grpo/cov_{name}_top_{p:g}pct"] == pytest.approx(
                sign * values[:k].mean().item(), rel=1e-5
            )
        for p in (20.0, 40.0):
            k = round(values.numel() * p / 100)
            assert metrics[f"cw_grpo/cov_{name}_top_{p:g}pct"] == pytest.approx(
                sign * values[:k].mean().item(), rel=0.1
            )
