"""What a method does: its behaviour (`Method`), the trainer hooks it may add (`TrainerHooks`) and
how it may change each rollout's prompt (`Prompt`, `Method.prompts`). What each method is (role,
module, verl registrations) is declared in recipes/methods/manifest.py; the registry of methods, and
the lookups the hubs use, are in recipes/methods/registry.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from recipes.methods import manifest

# a training row's dataloader pass, set by recipes/extensions/trainer.py on every batch it fetches
EPOCH_KEY = "recipes_epoch"


class TrainerHooks:
    """What a method adds to recipes/extensions/trainer.py's sync trainer. Each hook does nothing unless a
    method overrides it; `trainer` is the RecipesTrainerSync."""

    # extra TransferQueue fields `before_advantage` needs (beyond extra_fields, responses)
    advantage_fields: tuple[str, ...] = ()

    def setup_workers(self, trainer) -> None:
        """After verl's resource pools are set up: may swap the class of a role's workers."""

    def on_train_begin(self, trainer) -> None:
        """Before the first training step (after loading a checkpoint and the first validation)."""

    def before_step(self, trainer, timing_raw: dict) -> None:
        """Before the step's rollout (trainer.global_steps is the step about to run)."""

    def after_step(self, trainer, metrics: dict, timing_raw: dict) -> None:
        """After the step's update and its checkpoint, before its metrics are logged."""

    def after_validation(self, trainer, val_metrics: dict) -> None:
        """After each validation run during training."""

    def before_advantage(self, trainer, batch, samples: Samples, metrics: dict) -> None:
        """Before verl computes the step's advantages: add metrics, or rewrite fields of `batch`."""

    def advantage_groups(self, trainer, groups: list[str], samples: Samples) -> list[str]:
        """The advantage group of every sample (padding included, batch order), after
        `before_advantage`: verl normalizes each group's rewards on its own. `groups` starts as
        verl's uids (one per dataset row) and passes through each method's hook in turn."""
        return groups

    def dump_columns(self, trainer, extra: list[dict]) -> dict[str, list]:
        """Columns this method adds to the rollout dump, one value per sample (`extra` is each
        sample's agent-loop extra_fields, in dump order)."""
        return {}

    def save(self, trainer, folder: str) -> None:
        """Into a checkpoint's step folder, before verl writes its own."""

    def load(self, trainer, folder: str) -> None:
        """From a checkpoint's step folder, after verl has loaded its own."""


@dataclass(frozen=True)
class Samples:
    """The non-padding samples of a step, in batch order (for TrainerHooks.before_advantage)."""

    keep: list[int]  # their positions in the batch (padding left out)
    extra: list[dict]  # agent-loop extra_fields of every sample (padding included), by position
    infos: list[dict]  # the grader's reward_extra_info of the kept samples
    lengths: list[int]  # response lengths of the kept samples
    fields: dict[str, Any]  # `uid` and the TransferQueue fields asked for in advantage_fields (all samples)


@dataclass
class Prompt:
    """One rollout session's prompt, as our agent loop (recipes/extensions/agent_loop.py) builds it: it starts
    as the row's question in the dataset's own prompt, and each active method's `prompts` hook may
    change it, in declaration order (recipes/methods/manifest.py), whatever order `method=[...]`
    listed them in."""

    original: str  # the row's question (extra_info.question)
    question: str  # the question the generation prompt shows
    template: str | None = None  # the reasoning template around it; None: the dataset's prompt
    # the question the response is stored and trained under (log-probs, ratios); None: `question`
    trained_under: str | None = None
    rollout_log_probs: bool = True  # False: the rollout's log-probs do not belong to the stored prompt
    extra: dict[str, Any] = field(default_factory=dict)  # extra_fields recorded with the response


# `prompts(cfg, settings)` returns the hook the agent loop calls once per session:
# hook(prompt, row, training, n_rollouts), where `row` is the session's dataset row with
# `session_id`, `training` says it is a training (not a validation) row and `n_rollouts` is
# rollout.n; the hook changes `prompt` in place.
PromptHook = Callable[[Prompt, dict, bool, int], None]


# `configure(cfg, settings, explicit)` returns the keys an add-on sets after composition
# (recipes/methods/configure.py): the verl keys its declaration `derives`, and, where the preset or
# the command line set such a key itself (`explicit`: key -> where), the settings that key implies.
Configure = Callable[[Any, Any, Mapping[str, str]], dict[str, Any]]
COMMAND_LINE = "the command line"  # explicit's `where` for an override (else a preset's file)


def decides(explicit: Mapping[str, str], key: str, settings: list[str]) -> str:
    """Whether a derived `key` follows its `settings` ("settings"), or they follow the key because
    the preset or the command line set the key itself, and more directly than any of them ("key"):
    the command line over a preset, a preset over the defaults. "both": set at the same level, so
    they must agree."""

    def level(where: str | None) -> int:
        return 0 if where is None else 2 if where == COMMAND_LINE else 1

    ours, theirs = level(explicit.get(key)), max((level(explicit.get(s)) for s in settings), default=0)
    return "settings" if ours < theirs or ours == 0 else "key" if ours > theirs else "both"


@dataclass(frozen=True)
class Method:
    """What a method does: its settings, checks and hooks. What it is (its role, module, the names
    it registers with verl, what it adds to a checkpoint) is its `Declaration` in
    recipes/methods/manifest.py, under the same name."""

    name: str
    settings: type | None = None
    check: Callable[[Any, Any], None] | None = None
    check_data: Callable[[Any, Any, list[str]], None] | None = None
    hooks: Callable[[Any, Any], TrainerHooks] | None = None
    # changes each rollout's prompt in our agent loop (recipes/extensions/agent_loop.py)
    prompts: Callable[[Any, Any], PromptHook] | None = None
    configure: Configure | None = None

    @property
    def declaration(self) -> manifest.Declaration:
        return manifest.DECLARED[self.name]

    @property
    def summary(self) -> str:
        return self.declaration.summary

    @property
    def baseline(self) -> bool:
        """It sets the advantage and loss keys in its YAML: a run has exactly one."""
        return self.declaration.baseline
