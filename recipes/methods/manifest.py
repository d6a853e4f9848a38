"""Every method of the project, declared once, as data: what the parts that must not import a method
need to know about it. This module imports nothing beyond the standard library, because every verl
process reads it (our verl plugin) and so do tools that compose a config without training.

A `Declaration` says:
  role        "baseline": its configs/method/<name>.yaml sets the advantage and loss keys, and a run
              has exactly one. "add-on": its YAML sets only `recipes.*` keys (its mark and its
              settings); the verl keys it implies (`derives`) are set after composition by its
              module's `configure` (recipes/methods/configure.py). So the order of `method=[...]`
              never decides a value: Hydra merges a list group's files in list order, and two
              files that set one key would make the later one win.
  module      the module holding its `METHOD` (settings, checks, hooks, configure), or None for a
              baseline that is its YAML alone
  registers   {verl registry: the names its module registers there when it is imported}. Our verl
              plugin (recipes/extensions/plugins.py) imports the module in every verl process
              right after the verl module that holds that registry, and before Ray starts a fresh
              interpreter confirms that each name is there (recipes/verl_seam.py)
  derives     the verl keys an add-on's `configure` sets from its settings
  checkpoint_bytes_per_param  what a whole checkpoint holds beyond verl's own, per model
              parameter (recipes/plan.py sizes the disk with it)

Readers: recipes/methods/registry.py (builds REGISTRY from it), recipes/methods/configure.py,
recipes/extensions/plugins.py, recipes/checks.py, recipes/plan.py, recipes/run_folder.py.
Adding a method: docs/adding_a_method.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class VerlRegistry:
    """One of verl's name -> function tables that a method may add to."""

    module: str  # the verl module that defines it: importing it is what fills it in a process
    attribute: str  # the dict in that module
    what: str  # what its entries are, for messages
    key: str  # the config key that picks one of its entries


VERL_REGISTRIES = {
    "policy_loss": VerlRegistry(
        "verl.trainer.ppo.core_algos",
        "POLICY_LOSS_REGISTRY",
        "policy loss",
        "actor_rollout_ref.actor.policy_loss.loss_mode",
    ),
    "adv_estimator": VerlRegistry(
        "verl.trainer.ppo.core_algos",
        "ADV_ESTIMATOR_REGISTRY",
        "advantage estimator",
        "algorithm.adv_estimator",
    ),
}


@dataclass(frozen=True)
class Declaration:
    name: str  # as in method=[...], configs/method/<name>.yaml and recipes.<name>
    summary: str  # one line, with its paper
    role: Literal["baseline", "add-on"]
    module: str | None = None
    registers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # VERL_REGISTRIES key -> names
    derives: tuple[str, ...] = ()
    checkpoint_bytes_per_param: int = 0

    @property
    def baseline(self) -> bool:
        return self.role == "baseline"


def suffixed(base: str, suffixes: tuple[str, ...]) -> tuple[str, ...]:
    """`base` and `base-<suffix>...` for every subset of `suffixes`, kept in their order."""
    subsets = itertools.product((False, True), repeat=len(suffixes))
    return tuple(
        "-".join([base, *(s for s, on in zip(suffixes, flags, strict=True) if on)]) for flags in subsets
    )


DECLARATIONS: tuple[Declaration, ...] = (
    Declaration("grpo", "GRPO (Shao et al. 2024, DeepSeekMath eq. 3)", "baseline"),
    Declaration("dapo", "DAPO (Yu et al. 2025, arXiv 2503.14476)", "baseline"),
    Declaration("dr_grpo", "Dr. GRPO (Liu et al. 2025, arXiv 2503.20783)", "baseline"),
    Declaration(
        "prompt_aug",
        "Prompt augmentation (Lu, Huang, Balestriero 2026, arXiv 2602.03190): 13 reasoning templates in "
        "4 families, each with its format reward",
        "add-on",
        module="recipes.methods.prompt_aug",
    ),
    Declaration(
        "ta_grpo",
        "TA-GRPO (Le et al. 2026, arXiv 2601.22478): a question and its rephrasings pooled into one "
        "advantage group",
        "add-on",
        module="recipes.methods.ta_grpo",
        derives=("actor_rollout_ref.rollout.n", "actor_rollout_ref.rollout.calculate_log_probs"),
    ),
    Declaration(
        "cw_grpo",
        "CW-GRPO (Wang et al. 2026, arXiv 2605.11538): covariance-aware Gaussian reweighting of token "
        "advantages",
        "add-on",
        module="recipes.methods.cw_grpo",
        registers={"policy_loss": suffixed("cw_grpo", ("seqlogp", "allpos", "grad"))},
        derives=("actor_rollout_ref.actor.policy_loss.loss_mode",),
    ),
    Declaration(
        "prorl",
        "ProRL (NVIDIA 2025, Nemotron-Research-Reasoning-Qwen-1.5B, sec. 3.3.1): KL to a reference that "
        "is reset, with the optimizer, on a schedule or when training degrades",
        "add-on",
        module="recipes.methods.prorl",
        derives=(
            "actor_rollout_ref.actor.use_kl_loss",
            "actor_rollout_ref.actor.kl_loss_type",
            "actor_rollout_ref.actor.kl_loss_coef",
        ),
        checkpoint_bytes_per_param=4,  # the reference's fp32 shards (prorl_reference/) once it was reset
    ),
)

DECLARED: dict[str, Declaration] = {d.name: d for d in DECLARATIONS}


def ordered(marks: Mapping[str, object]) -> list[str]:
    """The methods a config's `recipes.methods` marks turn on, in declaration order (baselines
    first), whatever order `method=[...]` listed them in; unknown names last, in their order."""
    on = [name for name, mark in marks.items() if mark]
    return [d.name for d in DECLARATIONS if d.name in on] + [n for n in on if n not in DECLARED]


def active(marks: Mapping[str, object]) -> list[Declaration]:
    """The declarations of the methods `marks` turn on (unknown names left out)."""
    return [DECLARED[name] for name in ordered(marks) if name in DECLARED]


def wiring() -> list[tuple[str, str]]:
    """(verl module, our module) for every declared method module that registers names with verl:
    our plugin imports the second right after a process has imported the first."""
    pairs = []
    for d in DECLARATIONS:
        for registry in d.registers:
            pair = (VERL_REGISTRIES[registry].module, d.module)
            if pair not in pairs:
                pairs.append(pair)
    return pairs


def expected_names() -> list[tuple[str, str, str]]:
    """(verl registry, name, method) for every name a declared method registers with verl."""
    return [(reg, name, d.name) for d in DECLARATIONS for reg, names in d.registers.items() for name in names]
