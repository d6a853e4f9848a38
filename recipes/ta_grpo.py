"""TA-GRPO (Le et al. 2026, arXiv 2601.22478; docs/methods.md#ta-grpo): each question q0 with its N
rephrasings q1..qN in ONE dataset row, (N+1) x G responses pooled into one advantage group.

How it maps onto verl (docs/cpu_platform.md#groups-and-prompt-variants-in-verl):
  rollouts    `rollout.n` = (N+1) x G sessions per row; session k answers variant k // G (variant 0
              is the original question, variant v >= 1 the row's `rephrasings[v-1]`).
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

Settings (`recipes.ta_grpo`; configs/method/ta_grpo.yaml):
  n_rephrasings  N, the rephrasings used per question (each training row needs at least N)
  anchor         original | own
  groups         pooled | per_variant
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import OmegaConf

ANCHORS = ("original", "own")
GROUPINGS = ("pooled", "per_variant")
SETTINGS = ("n_rephrasings", "anchor", "groups")


class TAGRPOError(ValueError):
    """A TA-GRPO setting or data row that cannot work."""


@dataclass(frozen=True)
class TASettings:
    n_rephrasings: int
    anchor: str = "original"
    groups: str = "pooled"

    @property
    def n_variants(self) -> int:
        return self.n_rephrasings + 1

    def group_size(self, n_rollouts: int) -> int:
        """G: responses per variant, from rollout.n = (N+1) x G."""
        if n_rollouts % self.n_variants:
            raise TAGRPOError(
                f"actor_rollout_ref.rollout.n={n_rollouts} must be (N+1) x G with N = "
                f"recipes.ta_grpo.n_rephrasings={self.n_rephrasings}: a multiple of {self.n_variants}"
            )
        return n_rollouts // self.n_variants

    def variant(self, session: int, n_rollouts: int) -> int:
        """The variant that session `session` (0..n-1) answers: session // G."""
        return session // self.group_size(n_rollouts)


def make_settings(settings: Mapping) -> TASettings:
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise TAGRPOError(f"recipes.ta_grpo: unknown settings {unknown}; known: {list(SETTINGS)}")
    n = settings.get("n_rephrasings")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TAGRPOError(f"recipes.ta_grpo.n_rephrasings={n!r}: expected an int >= 1")
    anchor = settings.get("anchor", "original")
    if anchor not in ANCHORS:
        raise TAGRPOError(f"recipes.ta_grpo.anchor={anchor!r}: expected one of {ANCHORS}")
    groups = settings.get("groups", "pooled")
    if groups not in GROUPINGS:
        raise TAGRPOError(f"recipes.ta_grpo.groups={groups!r}: expected one of {GROUPINGS}")
    return TASettings(n, anchor, groups)


def settings_from_config(config) -> TASettings | None:
    """The `recipes.ta_grpo` settings, or None when TA-GRPO is off (not in `recipes.methods`)."""
    settings = OmegaConf.select(config, "recipes.ta_grpo")
    if settings is None or "ta_grpo" not in (OmegaConf.select(config, "recipes.methods") or {}):
        return None
    return make_settings(OmegaConf.to_container(settings, resolve=True))


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
            "`python -m recipes.rephrase`, docs/rephrase.md)"
        )
    return rephrasings[variant - 1]


def swap_question(messages: Sequence[Mapping[str, str]], original: str, replacement: str) -> list[dict]:
    """The dataset's chat messages with the original question in the last user turn replaced (its
    instruction text, before or after the question, stays)."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            if original not in m["content"]:
                raise TAGRPOError(
                    "the last user message does not contain extra_info.question verbatim, so the "
                    "rephrasing cannot take its place"
                )
            m["content"] = m["content"].replace(original, replacement, 1)
            return out
    raise TAGRPOError("the prompt has no user message")


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
