"""TA-GRPO (Le et al. 2026, arXiv 2601.22478; docs/methods.md#ta-grpo): each question q0 with its N
rephrasings q1..qN in ONE dataset row, (N+1) x G responses pooled into one advantage group.

How it maps onto verl (docs/cpu_platform.md#groups-and-prompt-variants-in-verl):
  rollouts    `rollout.n` = (N+1) x G sessions per row; session k answers variant k // G (variant 0
              is the original question, variant v >= 1 the row's `rephrasings[v-1]`). `configure`
              sets rollout.n from `group_size` (G), or, when the preset or the command line sets
              rollout.n itself, G from it.
  groups      `pooled` (the paper, eq. 3): every session shares the row's uid, so verl's GRPO
              normalization over a uid IS the joint normalization. `per_variant` (TA-GRPO*, the
              paper's ablation): each variant's G responses are normalized on their own.
  anchor      `original` (the paper, eq. 4): every response is stored with q0's prompt ids, so the
              old, reference and current log-probs (the importance ratio) are all computed under
              q0 while generation used q_v. `own` (the authors' public code): each response keeps
              the prompt it was generated from. Anchoring changes no shapes and adds no forward
              pass: the trainer computes the same log-probs, on different prompt tokens.
With prompt augmentation on, a rollout's template applies to whichever question it shows; anchoring
swaps only the question text.

A rephrasing equal to `PAD` is an empty variant slot: the authors' published set pads every
question to the same number of rows with rows whose question is empty, and their trainer answers
them like any other row of the question (its prompt is the instruction alone, its responses in the
question's group). The session of a `PAD` variant shows the question as empty text, so the same.

Settings (`recipes.ta_grpo`): `TASettings` below; `python -m recipes.methods.registry` lists them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from omegaconf import OmegaConf

from recipes.files import read_meta
from recipes.methods.base import Method, Prompt, Samples, TrainerHooks, decides
from recipes.settings import ConfigError, setting

PAPER = "Le et al. 2026, arXiv 2601.22478"
PAD = "<ta-grpo-pad>"
"""A `rephrasings` entry that is an empty variant slot (the authors' pad rows): its sessions see an
empty question. A sentinel rather than "", which the row schema refuses as a rephrasing."""


class TAGRPOError(ValueError):
    """A TA-GRPO data row that cannot work."""


@dataclass(frozen=True)
class TASettings:
    n_rephrasings: int = setting(
        3,
        ">= 1",
        "N, the rephrasings used per question (each training row needs at least N)",
        PAPER + ", sec. 4",
    )
    anchor: Literal["original", "own"] = setting(
        "original",
        None,
        "original: every response is trained with q0's prompt, so importance ratios are computed "
        "under the original question; own: with the prompt it was generated from (the authors' code)",
        PAPER + ", eq. 4",
    )
    groups: Literal["pooled", "per_variant"] = setting(
        "pooled",
        None,
        "pooled: one advantage group of (N+1) x G responses per question; per_variant: each "
        "variant's G on its own (TA-GRPO*, used with anchor=own)",
        PAPER + ", eq. 3 and appendix C",
    )
    group_size: int = setting(
        8,
        ">= 1",
        "G, the responses to each variant: actor_rollout_ref.rollout.n is set to (N+1) x G, unless the "
        "preset or the command line sets rollout.n more directly (the command line over a preset): "
        "then G = rollout.n / (N+1), which must be whole; both at one level must agree",
        PAPER,
    )

    @property
    def n_variants(self) -> int:
        return self.n_rephrasings + 1

    def group_of(self, n_rollouts: int) -> int:
        """G: responses per variant, from rollout.n = (N+1) x G."""
        if n_rollouts % self.n_variants:
            raise ConfigError(
                f"{N_KEY}={n_rollouts} must be (N+1) x G with N = "
                f"recipes.ta_grpo.n_rephrasings={self.n_rephrasings}: a multiple of {self.n_variants} "
                "(or set recipes.ta_grpo.group_size, G, alone)"
            )
        return n_rollouts // self.n_variants

    def variant(self, session: int, n_rollouts: int) -> int:
        """The variant that session `session` (0..n-1) answers: session // G."""
        return session // self.group_of(n_rollouts)


N_KEY = "actor_rollout_ref.rollout.n"
G_KEY = "recipes.ta_grpo.group_size"
LOG_PROBS_KEY = "actor_rollout_ref.rollout.calculate_log_probs"


def configure(cfg, ta: TASettings, explicit: Mapping[str, str]) -> dict[str, Any]:
    """rollout.n = (N+1) x G from the settings; when the preset or the command line sets
    rollout.n more directly than G (base.py `decides`), G = rollout.n / (N+1) instead. With
    anchor=original the rollout's log-probs are not computed (`check` refuses an explicit true)."""
    out: dict[str, Any] = {}
    if ta.anchor == "original" and LOG_PROBS_KEY not in explicit:
        out[LOG_PROBS_KEY] = False  # they are under q_v; the trainer's are under q0
    rule = decides(explicit, N_KEY, [G_KEY])
    if rule == "settings":
        out[N_KEY] = ta.n_variants * ta.group_size
        return out
    n = int(OmegaConf.select(cfg, N_KEY))
    group = ta.group_of(n)
    if rule == "both" and group != ta.group_size:
        raise ConfigError(
            f"{N_KEY}={n} ({explicit[N_KEY]}) is (N+1) x G = {ta.n_variants} x {group}, not "
            f"{G_KEY}={ta.group_size} ({explicit[G_KEY]}): set one of them."
        )
    out[G_KEY] = group
    return out


def check(cfg, ta: TASettings) -> None:
    def get(key):
        return OmegaConf.select(cfg, key)

    group = ta.group_of(int(get(N_KEY)))
    if ta.group_size != group:
        raise ConfigError(f"{N_KEY}={get(N_KEY)} is not (N+1) x G with {G_KEY}={ta.group_size}.")
    if ta.groups == "per_variant" and group < 2:
        raise ConfigError(
            f"recipes.ta_grpo.groups=per_variant normalizes each variant's G={group} responses on their "
            "own: rollout.n must give G >= 2."
        )
    if ta.anchor == "original":
        why = "with recipes.ta_grpo.anchor=original the trainer's log-probs are under q0 and the rollout's under q_v"
        if get(LOG_PROBS_KEY):
            raise ConfigError(f"{LOG_PROBS_KEY} must be false: {why}.")
        rc = get("algorithm.rollout_correction") or {}
        for key in ("rollout_is", "rollout_rs"):
            if rc.get(key) is not None:
                raise ConfigError(f"algorithm.rollout_correction.{key} must be null: {why}.")
        if rc.get("bypass_mode"):
            raise ConfigError(f"algorithm.rollout_correction.bypass_mode must be false: {why}.")


def check_data(cfg, ta: TASettings, train_files: list[str]) -> None:
    """Every training row has at least N rephrasings, and a file that `prepare` wrote from the
    authors' set (its metadata names its variants per question, pads included) is read whole."""
    import pyarrow.parquet as pq

    n = ta.n_rephrasings
    for f in train_files:
        variants = read_meta(f).get("variants_per_question")
        if variants is not None and variants != ta.n_variants:
            raise ConfigError(
                f"data.train_files: {f} holds {variants} variants per question (the authors' rows, pads "
                f"included), not N+1={ta.n_variants}: set recipes.ta_grpo.n_rephrasings={variants - 1} "
                f"({N_KEY} follows: (N+1) x G; docs/data.md#the-ta-grpo-authors-sets)."
            )
        counts = pq.read_table(f, columns=["rephrasings"]).column("rephrasings").to_pylist()
        short = [i for i, r in enumerate(counts) if len(r or []) < n]
        if short:
            raise ConfigError(
                f"data.train_files: {f}: row {short[0]} (and {len(short) - 1} more) has fewer than "
                f"recipes.ta_grpo.n_rephrasings={n} rephrasings; make them with "
                "`python -m recipes.tools.rephrase` (docs/rephrase.md)."
            )


def variant_question(row: Mapping[str, Any], variant: int, question: str) -> str:
    """The question text of `variant` for a dataset row whose original question is `question`."""
    if variant == 0:
        return question
    rephrasings = row.get("rephrasings")
    rephrasings = list(rephrasings) if rephrasings is not None else []
    if len(rephrasings) < variant or not isinstance(rephrasings[variant - 1], str):
        raise TAGRPOError(
            f"row {row.get('index')!r} of data source {row.get('data_source')!r} has {len(rephrasings)} "
            f"rephrasings; TA-GRPO needs recipes.ta_grpo.n_rephrasings of them (make them with "
            "`python -m recipes.tools.rephrase`, docs/rephrase.md)"
        )
    return "" if rephrasings[variant - 1] == PAD else rephrasings[variant - 1]


class TAPrompts:
    """The agent loop's prompt hook: training session k shows variant k // G (named in the
    response's extra_fields); with `anchor: original` the response is stored under q0 (eq. 4) and
    the rollout's log-probs, computed under q_v, are dropped. Validation rows show q0."""

    def __init__(self, ta: TASettings):
        self.ta = ta

    def __call__(self, prompt: Prompt, row: dict, training: bool, n_rollouts: int) -> None:
        if not training:
            return
        variant = self.ta.variant(int(row["session_id"]), n_rollouts)
        prompt.extra["variant"] = variant
        prompt.question = variant_question(row, variant, prompt.original)
        if self.ta.anchor == "original":
            if variant:
                prompt.trained_under = prompt.original
            prompt.rollout_log_probs = False


# ------------------------------------------------------------------------------- metrics
def diagnostics(
    groups: Sequence[str],
    variants: Sequence[int],
    scores: Sequence[float],
    accs: Sequence[float],
    n_variants: int,
) -> dict[str, float]:
    """The paper's diagnostic and per-variant accuracy for one step (section 5.2):
      ta_grpo/original_uniform_frac   share of questions whose variant-0 responses all got the same
                                      reward (zero advantage under plain GRPO)
      ta_grpo/pooled_uniform_frac     share whose whole pooled group did (zero under TA-GRPO)
      ta_grpo/group_reward_std        mean over questions of the pooled group's reward std
      ta_grpo/variant_<v>/acc         accuracy of the responses to variant v (0 = original)
    `groups` is each response's question (its uid)."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        by_group[g].append(i)
    original_uniform = pooled_uniform = 0
    spreads = []
    for idx in by_group.values():
        pooled = [scores[i] for i in idx]
        original = [scores[i] for i in idx if variants[i] == 0]
        pooled_uniform += max(pooled) == min(pooled)
        original_uniform += bool(original) and max(original) == min(original)
        spreads.append(float(np.std(pooled)))
    n = len(by_group)
    out = {
        "ta_grpo/original_uniform_frac": original_uniform / n,
        "ta_grpo/pooled_uniform_frac": pooled_uniform / n,
        "ta_grpo/group_reward_std": float(np.mean(spreads)),
    }
    for v in range(n_variants):
        acc = [accs[i] for i in range(len(variants)) if variants[i] == v]
        if acc:
            out[f"ta_grpo/variant_{v}/acc"] = float(np.mean(acc))
    return out


# ------------------------------------------------------------------------------- trainer hooks
class TAHooks(TrainerHooks):
    """The paper's diagnostics every step; for `groups: per_variant` (TA-GRPO*) each response's
    advantage group becomes (question, variant), so each variant's G responses are normalized on
    their own."""

    def __init__(self, ta: TASettings):
        self.ta = ta

    def before_advantage(self, trainer, batch, samples: Samples, metrics: dict) -> None:
        uids = [str(getattr(u, "data", u)) for u in samples.fields["uid"]]
        variants = [int(e.get("variant", 0)) for e in samples.extra]
        metrics.update(
            diagnostics(
                [uids[i] for i in samples.keep],
                [variants[i] for i in samples.keep],
                [float(i.get("score", 0.0)) for i in samples.infos],
                [float(i.get("acc", 0.0)) for i in samples.infos],
                self.ta.n_variants,
            )
        )

    def advantage_groups(self, trainer, groups: list[str], samples: Samples) -> list[str]:
        if self.ta.groups == "pooled":  # eq. 3: the row's uid is the question's pooled group
            return groups
        variants = [int(e.get("variant", 0)) for e in samples.extra]
        return [f"{g}:v{v}" for g, v in zip(groups, variants, strict=True)]

    def dump_columns(self, trainer, extra: list[dict]) -> dict[str, list]:
        return {
            "variant": [e.get("variant") for e in extra],
            # anchored: the prompt the response was generated from (the dump's `input` is q0's)
            "generation_input": [
                trainer.tokenizer.decode(e["generation_prompt_ids"], skip_special_tokens=True)
                if "generation_prompt_ids" in e
                else None
                for e in extra
            ],
        }


METHOD = Method(
    "ta_grpo",
    settings=TASettings,
    check=check,
    check_data=check_data,
    hooks=lambda cfg, ta: TAHooks(ta),
    prompts=lambda cfg, ta: TAPrompts(ta),
    configure=configure,
)
