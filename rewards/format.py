"""The seam for template format rewards (prompt augmentation, docs/methods.md#prompt-augmentation).

A template's format rule is a list of (substring, weight): the response earns `weight` for each
substring that occurs in it EXACTLY once (the authors' rule). A template registered with no
checks always earns 1.0. The templates themselves come with prompt_aug/templates.py, which
registers all 13 rules on import (done here on the first unknown name); the grader only looks
rules up by name.

`compute_score` adds `format_weight * format_score` to accuracy when `extra_info["template"]`
names a template; a name that was never registered is a configuration error and raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FormatRule:
    checks: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for item in self.checks:
            if len(item) != 2 or not isinstance(item[0], str) or not item[0]:
                raise ValueError(f"format check {item!r} must be a (non-empty substring, weight) pair")
        total = sum(w for _, w in self.checks)
        if self.checks and not 0.0 < total <= 1.0 + 1e-9:
            raise ValueError(f"format check weights must sum to (0, 1], got {total}")

    def score(self, response: str) -> float:
        """In [0, 1]: the summed weights of the substrings that occur exactly once."""
        if not self.checks:
            return 1.0
        return float(sum(weight for sub, weight in self.checks if response.count(sub) == 1))


FORMAT_RULES: dict[str, FormatRule] = {}


def register_format_rule(name: str, checks: Sequence[tuple[str, float]] | FormatRule) -> FormatRule:
    """Register the format rule of template `name` (re-registering the same rule is a no-op)."""
    rule = checks if isinstance(checks, FormatRule) else FormatRule(tuple((s, float(w)) for s, w in checks))
    if name in FORMAT_RULES and FORMAT_RULES[name] != rule:
        raise ValueError(f"template {name!r} already has a different format rule registered")
    FORMAT_RULES[name] = rule
    return rule


def format_score_for(extra_info: Mapping | None, response: str) -> float | None:
    """The format score of `response` under the template named in `extra_info["template"]`, or
    None when no template is named."""
    if not isinstance(extra_info, Mapping):
        return None
    name = extra_info.get("template")
    if name is None or name == "":
        return None
    rule = FORMAT_RULES.get(name)
    if rule is None:
        import prompt_aug.templates  # noqa: F401  (registers the 13 templates' rules)

        rule = FORMAT_RULES.get(name)
    if rule is None:
        known = ", ".join(sorted(FORMAT_RULES)) or "none"
        raise KeyError(
            f"extra_info names template {name!r}, which has no registered format rule (registered: {known})"
        )
    return rule.score(response)
