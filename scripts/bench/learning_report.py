"""The learning benchmark's report (scripts/bench/learning.py): the table, the plot, and each
paper's mechanism measured from the training metrics of every seed.

  entropy, response length   per step (prompt augmentation's and ProRL's claims: no collapse)
  grad-norm spread, clip fraction   over the steps (CW-GRPO's stability claim)
  ProRL resets               held-out accuracy at the checkpoint at or before each reset step and
                             at the next one after it (does it keep improving past a reset?), and
                             the train reward of the RESET_WINDOW steps before and after it
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

# each mechanism curve's training metric (verl's names)
MECHANISM = {
    "entropy": "actor/entropy",
    "response_length": "response_length/mean",
    "grad_norm": "actor/grad_norm",
    "clipfrac": "actor/pg_clipfrac",
}
RESET_WINDOW = 3  # training steps on each side of a ProRL reset whose train reward is averaged
# the run without ProRL whose train reward a ProRL reset is compared with (GRPO's unless named):
# `all` adds prompt augmentation's format term to its reward, so GRPO's is not the same quantity
RESET_CONTROL = {"all": "prompt_aug"}


def series(train: list[dict], key: str) -> dict[int, float]:
    """One training metric by step."""
    return {t["step"]: t[key] for t in train if key in t}


def mechanism(result: dict) -> dict:
    """One seed's mechanism metrics from its training metrics and held-out accuracy by step."""
    train = result["train"]
    out = {name: series(train, key) for name, key in MECHANISM.items()}
    grad, clip = list(out["grad_norm"].values()), list(out["clipfrac"].values())
    out["grad_norm_std"] = statistics.pstdev(grad) if grad else float("nan")
    out["clipfrac_mean"] = mean(clip)
    acc = result["acc"]
    resets = []
    for step in (s for s, v in series(train, "prorl/reset").items() if v):
        before = max((k for k in acc if k <= step), default=None)
        after = min((k for k in acc if k > step), default=None)
        if before is not None and after is not None:
            reward_before, reward_after = reward_around(train, step)
            resets.append(
                {
                    "reset_step": step,
                    "before_step": before,
                    "before": acc[before],
                    "after_step": after,
                    "after": acc[after],
                    "reward_before": reward_before,
                    "reward_after": reward_after,
                }
            )
    out["prorl_resets"] = resets
    return out


def reward_around(train: list[dict], step: int) -> tuple[float, float]:
    """The mean train reward of the RESET_WINDOW steps up to `step` and of the RESET_WINDOW after
    it (a ProRL reset acts after its step's update)."""
    reward = series(train, "critic/score/mean")
    return (
        mean([v for k, v in reward.items() if step - RESET_WINDOW < k <= step]),
        mean([v for k, v in reward.items() if step < k <= step + RESET_WINDOW]),
    )


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def first_last(runs: list[dict], key: str, fmt: str) -> str:
    """Mean of the first 5 / last 5 training steps of a train metric, averaged over seeds."""
    first = [mean([t[key] for t in r["train"] if key in t][:5]) for r in runs]
    last = [mean([t[key] for t in r["train"] if key in t][-5:]) for r in runs]
    return f"{mean(first):{fmt}} / {mean(last):{fmt}}"


def ends(s: dict, curve: str) -> str:
    """A curve's mean over seeds at step 0 and at the last step."""
    by_step = s[curve]
    return f"{100 * by_step['0']['mean']:.1f}% / {100 * by_step[str(s['steps'])]['mean']:.1f}%"


def versus_grpo(s: dict) -> str:
    """The paired difference to GRPO under the training reward's rule / the second rule, in points
    with their 95% intervals; `(noise)` where the interval holds 0."""

    def one(v: dict) -> str:
        low, high = v["ci95"]
        return f"{100 * v['diff']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]{'' if v['beyond_noise'] else ' (noise)'}"

    if "vs_grpo" not in s:
        return "-"
    return " / ".join(one(s[key]) for key in ("vs_grpo", "vs_grpo_second_rule") if key in s)


def verdict(s: dict) -> str:
    """Whether a method's final held-out difference to GRPO is beyond the noise (its 95% interval
    excludes 0) under both rules, one of them, or neither."""
    rule, second = s["vs_grpo"], s["vs_grpo_second_rule"]
    if rule["beyond_noise"] and second["beyond_noise"]:
        if (rule["diff"] > 0) == (second["diff"] > 0):
            return f"{'better' if rule['diff'] > 0 else 'worse'} than GRPO beyond the noise under both rules"
        return "beyond the noise under both rules, in opposite directions"
    if rule["beyond_noise"] or second["beyond_noise"]:
        which = "training reward's rule" if rule["beyond_noise"] else "second rule"
        return f"beyond the noise under the {which} only"
    return "within the noise under both rules"


def verdicts(summary: dict) -> str:
    """One line per method compared with GRPO: its verdict, and how far the seeds agree. The
    interval resamples seeds and questions; with one seed, the questions only."""
    lines = []
    for method, s in summary.items():
        if "vs_grpo" not in s or "vs_grpo_second_rule" not in s:
            continue
        rule, second = s["vs_grpo"], s["vs_grpo_second_rule"]
        diffs = f"{100 * rule['diff']:+.1f} / {100 * second['diff']:+.1f} points"
        per_seed = rule.get("per_seed", [])
        if len(per_seed) < 2:
            seeds = "one seed: the interval covers the choice of questions, not of seeds"
        else:
            same = sum(d * rule["diff"] > 0 for d in per_seed)
            seeds = f"{same} of {len(per_seed)} seeds on that side under the training reward's rule"
        lines.append(f"- {method} ({s['n_seeds']} seed(s)): {diffs}, {verdict(s)}; {seeds}")
    return "\n".join(lines) + "\n" if lines else ""


def headline(summary: dict) -> str:
    """The short table the README shows: final held-out accuracy under each rule (mean over seeds,
    their range), the difference to GRPO of the same seeds with its interval, and the verdict."""

    def final(s: dict, curve: str) -> str:
        last = s[curve][str(s["steps"])]
        spread = f" ({100 * last['min']:.1f}-{100 * last['max']:.1f})" if s["n_seeds"] > 1 else ""
        return f"{100 * last['mean']:.1f}%{spread}"

    def judged(s: dict) -> str:
        if "vs_grpo_second_rule" not in s:
            return "-"
        one_seed = len(s["vs_grpo"].get("per_seed", [])) < 2
        return verdict(s) + (" (one seed: the seeds' spread not covered)" if one_seed else "")

    lines = [
        "| method | seeds | held-out, last step: mean (range) | second rule | minus GRPO of the same seeds, 95% "
        "interval: rule / second rule | verdict |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for method, s in summary.items():
        lines.append(
            f"| {method} | {s['n_seeds']} | {final(s, 'acc_by_step')} | {final(s, 'acc_second_rule_by_step')} "
            f"| {versus_grpo(s).replace(' (noise)', '')} | {judged(s)} |"
        )
    return "\n".join(lines) + "\n"


def reset_lines(summary: dict, results: dict) -> str:
    """One line per ProRL reset of each seed: held-out accuracy at the checkpoints around it, the
    train reward of the steps around it, and the control's (RESET_CONTROL; same seed) over the same
    steps."""
    lines = []
    for method, s in summary.items():
        name = RESET_CONTROL.get(method, "grpo")
        control = results.get(name, [])
        for seed, resets in enumerate(s["mechanism"].get("prorl_resets", [])):
            for r in resets:
                w = r["reset_step"]
                first = max(1, w - RESET_WINDOW + 1)
                line = (
                    f"- {method}, seed {seed}, reset after step {w}: held-out {100 * r['before']:.1f}% "
                    f"(step {r['before_step']}) -> {100 * r['after']:.1f}% (step {r['after_step']}); "
                    f"train reward {r['reward_before']:.3f} (steps {first}-{w}) -> "
                    f"{r['reward_after']:.3f} (steps {w + 1}-{w + RESET_WINDOW})"
                )
                if seed < len(control):
                    before, after = reward_around(control[seed]["train"], w)
                    line += f", {'GRPO' if name == 'grpo' else name}'s {before:.3f} -> {after:.3f}"
                lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def summary_table(summary: dict, results: dict) -> str:
    """One row per method, means over seeds. Train columns: mean of the first 5 / last 5 steps."""
    lines = [
        "| method | held-out acc, step 0 | final | seeds: range | best | vs GRPO, 95% CI: rule / second rule | second rule: "
        "step 0 / final | rephrased: step 0 / final | three-operation: step 0 / final | steps "
        "| train reward | entropy | response tokens | grad-norm std | clip fraction | s/step | wall min |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method, s in summary.items():
        runs = results[method]
        low, high = s["final_acc_range"]
        lines.append(
            f"| {method} | {100 * s['initial_acc']:.1f}% | {100 * s['final_acc']:.1f}% "
            f"| {100 * low:.1f}-{100 * high:.1f}% ({s['n_seeds']}) | {100 * s['best_acc']:.1f}% | {versus_grpo(s)} "
            f"| {ends(s, 'acc_second_rule_by_step')} | {ends(s, 'acc_rephrased_by_step')} "
            f"| {ends(s, 'acc_ood_by_step')} | {s['steps']} | {first_last(runs, 'critic/score/mean', '.3f')} "
            f"| {first_last(runs, 'actor/entropy', '.2f')} | {first_last(runs, 'response_length/mean', '.0f')} "
            f"| {s['mechanism']['grad_norm_std']['mean']:.3f} | {s['mechanism']['clipfrac_mean']['mean']:.4f} "
            f"| {seconds_a_step(runs):.1f} | {s['wall_s'] / 60:.1f} |"
        )
    return "\n".join(lines) + "\n"


def seconds_a_step(runs: list[dict]) -> float:
    """The median seconds of a training step over `runs`, the first step (start-up) left out."""
    per_step = sorted(t["timing_s/step"] for r in runs for t in r["train"][1:] if "timing_s/step" in t)
    return per_step[len(per_step) // 2] if per_step else float("nan")


def machines(results: dict) -> str:
    """One line per run: its median seconds a step, its minutes (training and evaluation), and the
    CPU it trained on, which result.json records since 2026-11-28 (older runs: not recorded)."""
    return "".join(
        f"- {r.get('run', method)}: {seconds_a_step([r]):.1f} s/step, {r['wall_s'] / 60:.1f} min, "
        f"{r.get('cpu') or 'CPU not recorded'}\n"
        for method, runs in results.items()
        for r in runs
    )


def band(ax, curve: dict, scale: float = 100, **style):
    """A curve over seeds by step ({"<step>": {"mean", "min", "max"}}): its mean as a line (x
    `scale`), the seeds' range as a band in the line's colour. Returns the line."""
    xs = sorted(int(k) for k in curve)
    (line,) = ax.plot(xs, [scale * curve[str(x)]["mean"] for x in xs], **style)
    low, high = ([scale * curve[str(x)][b] for x in xs] for b in ("min", "max"))
    ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.15)
    return line


def plot(summary: dict, results: dict, path: Path, heldout_n: int) -> None:
    """Held-out accuracy (mean over seeds, band: their range; dashed: the second rule), accuracy on
    the rephrased (solid) and three-operation (dotted) sets, and the train reward (mean over seeds)
    against the step; each mechanism metric against the step (band: the seeds' range); pass@k; and
    the held-out accuracy before and after each ProRL reset."""
    os.environ.setdefault("MPLCONFIGDIR", str(path.parent / ".matplotlib"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 3, figsize=(16, 12.6))
    (ax_acc, ax_other, ax_rew), row2, (ax_clip, ax_pass, ax_reset) = axes
    mechanism_axes = [*row2, ax_clip]  # one per MECHANISM metric
    for method, s in summary.items():
        acc, second = s["acc_by_step"], s["acc_second_rule_by_step"]
        steps = sorted(int(k) for k in acc)
        line = band(ax_acc, acc, marker="o", label=f"{method} ({s['n_seeds']} seed(s))")
        ax_acc.plot(steps, [100 * second[str(k)]["mean"] for k in steps], "--", color=line.get_color())
        for curve, style in (("acc_rephrased_by_step", "-"), ("acc_ood_by_step", ":")):
            y = [100 * s[curve][str(k)]["mean"] for k in steps]
            ax_other.plot(
                steps, y, style, marker="o", color=line.get_color(), label=method if style == "-" else None
            )
        by_step: dict[int, list[float]] = {}
        for r in results[method]:
            for t in r["train"]:
                if "critic/score/mean" in t:
                    by_step.setdefault(t["step"], []).append(t["critic/score/mean"])
        xs = sorted(by_step)
        reward = [mean(by_step[x]) for x in xs]
        smooth = [mean(reward[max(0, i - 4) : i + 1]) for i in range(len(reward))]  # 5-step mean
        ax_rew.plot(xs, smooth, color=line.get_color(), label=f"{method} (5-step mean)")
        ax_rew.plot(xs, reward, color=line.get_color(), alpha=0.25)
        _pass_and_resets(ax_pass, ax_reset, s, method, line.get_color())
        for ax, name in zip(mechanism_axes, MECHANISM, strict=True):
            band(ax, s["mechanism"][f"{name}_by_step"], scale=1, color=line.get_color(), label=method)
    ax_acc.set(
        xlabel="training step",
        ylabel="held-out greedy accuracy (%)",
        title=f"{heldout_n} held-out questions (band: seeds' range; dashed: second rule)",
    )
    ax_other.set(
        xlabel="training step",
        ylabel="greedy accuracy (%)",
        title="rephrased held-out (solid), three-operation (dotted)",
    )
    ax_rew.set(
        xlabel="training step",
        ylabel="mean train reward",
        title="train reward, mean over seeds (faint: each step)",
    )
    for ax, name in zip(mechanism_axes, MECHANISM, strict=True):
        ax.set(
            xlabel="training step",
            ylabel=MECHANISM[name],
            title=f"{MECHANISM[name]}, mean over seeds (band: range)",
        )
    sampling = next(iter(summary.values()), {}).get("pass@k_sampling")
    k = f"pass@{sampling['k']}" if sampling else "pass@k"
    at = f"temperature {sampling['temperature']}, top-p {sampling['top_p']}" if sampling else "not measured"
    ax_pass.set(xlabel="training step", ylabel=f"{k} (%)", title=f"{k} at {at} (band: range)")
    if not ax_reset.lines:
        ax_reset.text(0.5, 0.5, "no ProRL reset in these runs", ha="center", transform=ax_reset.transAxes)
    ax_reset.set(
        xlabel="training step",
        ylabel="held-out greedy accuracy (%)",
        title="ProRL: held-out before and after each reset (dashed: reset)",
    )
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")  # six methods share each panel
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_heldout(summary: dict, path: Path, heldout_n: int) -> None:
    """The README's figure: held-out accuracy against the step under the training reward's rule
    and under the second rule, one panel each, per method the mean over seeds with their range as
    a band."""
    os.environ.setdefault("MPLCONFIGDIR", str(path.parent / ".matplotlib"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    rules = {"acc_by_step": "the training reward's rule", "acc_second_rule_by_step": "the second rule"}
    for ax, (curve, rule) in zip(axes, rules.items(), strict=True):
        for method, s in summary.items():
            steps = sorted(int(k) for k in s[curve])
            last = s[curve][str(steps[-1])]
            seeds = "1 seed"
            if s["n_seeds"] > 1:
                seeds = f"{100 * last['min']:.1f}-{100 * last['max']:.1f}, {s['n_seeds']} seeds"
            band(ax, s[curve], marker="o", label=f"{method}: {100 * last['mean']:.1f}% ({seeds})")
        ax.set(xlabel="training step", title=f"graded by {rule}", xticks=steps)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left")
    axes[0].set_ylabel(f"greedy accuracy on {heldout_n} held-out questions (%)")
    fig.suptitle("mean over seeds, band: their range", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pass_and_resets(ax_pass, ax_reset, s: dict, method: str, color) -> None:
    """A method's pass@k by step (mean, band: range), and each seed's ProRL resets: the held-out
    accuracy at the checkpoint before a reset joined to the one after, the reset step marked."""
    if s.get("pass@k_by_step"):
        band(ax_pass, s["pass@k_by_step"], marker="o", color=color, label=method)
    for i, resets in enumerate(s["mechanism"].get("prorl_resets", [])):
        for j, r in enumerate(resets):
            label = method if i == j == 0 else None
            ax_reset.plot(
                [r["before_step"], r["after_step"]],
                [100 * r["before"], 100 * r["after"]],
                marker="o",
                color=color,
                label=label,
            )
            ax_reset.axvline(r["reset_step"], color=color, alpha=0.2, linestyle="--")
