"""The 13 reasoning templates of prompt augmentation and how a prompt is rendered under one.

Prompt augmentation (Lu, Huang, Balestriero 2026, arXiv 2602.03190;
docs/methods.md#prompt-augmentation) shows each training prompt under one of 13 templates in 4
families and adds a template-specific format score to the accuracy reward. The templates and their
format rules are data: `templates.json` beside this file (the authors' published texts).

A template changes three things, whatever the model:
  system            replaces the dataset's system prompt;
  user_suffix       is appended to the question in the user turn;
  assistant_prefix  pre-fills the start of the assistant turn ("teacher" variants put `<think>` or
                    `<solution>` there, so the response is checked only for the rest).
The messages go through the model's own chat template (`add_generation_prompt=True`), then the
assistant prefix is appended to the text. For a ChatML tokenizer (Qwen2.5) this is byte-identical
to the authors' prompts; for other chat models it is their natural equivalent. A chat template
that refuses a system turn (Gemma-style) gets the system text at the head of the user turn.

    python -m prompt_aug.templates list
    python -m prompt_aug.templates show NAME --question "What is 2+2?" --chatml
    python -m prompt_aug.templates show NAME --question "What is 2+2?" --tokenizer PATH

`show` prints the prompt exactly as the model sees it, byte for byte when piped (with `--tokenizer`,
through that tokenizer's chat template; with `--chatml`, through plain ChatML, loading nothing).
Each template carries its format rule (`Template.rule`); `format_score(name, response)` applies it.
The training reward adds it to accuracy in one place, rewards/training.py.

The same file holds other papers' fixed training prompts (`PAPER_TEMPLATES`, e.g. `cw-grpo`, the
CW-GRPO authors' <think>/<answer> system prompt and its format reward). They are not among the 13:
"all" and the family names never select them, and `list` shows only the 13. A run selects one by
name (`recipes.prompt_aug.templates: [cw-grpo]`), so the same sampler, agent-loop hook and reward
show every prompt under it and add its format score; `get`, `show`, `render` and `format_score`
take their names like any other.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("templates.json")


class TemplateError(ValueError):
    """A template name, family or tokenizer that prompt augmentation cannot use."""


@dataclass(frozen=True)
class FormatRule:
    """A template's format rule: the response earns `weight` for each substring that occurs in it
    EXACTLY once (the authors' rule); a rule with no checks always earns 1.0."""

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


@dataclass(frozen=True)
class Template:
    name: str
    family: str
    system: str
    user_suffix: str
    assistant_prefix: str
    rule: FormatRule

    def messages(self, question: str) -> list[dict[str, str]]:
        """The chat messages of `question` under this template (before the assistant prefix)."""
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": question + self.user_suffix},
        ]


def _templates(entries: list[dict], families: Mapping[str, str], seen: set[str]) -> dict[str, Template]:
    templates: dict[str, Template] = {}
    for t in entries:
        if t["family"] not in families:
            raise TemplateError(f"{DATA_FILE}: template {t['name']!r} has unknown family {t['family']!r}")
        if t["name"] in templates or t["name"] in seen:
            raise TemplateError(f"{DATA_FILE}: template {t['name']!r} appears twice")
        try:
            rule = FormatRule(tuple((s, float(w)) for s, w in t["format_checks"]))
        except ValueError as exc:
            raise TemplateError(f"{DATA_FILE}: template {t['name']!r}: {exc}") from None
        templates[t["name"]] = Template(
            t["name"], t["family"], t["system"], t["user_suffix"], t["assistant_prefix"], rule
        )
    return templates


def _load() -> tuple[dict[str, Template], dict[str, str], dict[str, Template]]:
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    families = dict(data["families"])
    templates = _templates(data["templates"], families, set())
    return templates, families, _templates(data.get("paper_templates", []), families, set(templates))


TEMPLATES, FAMILIES, PAPER_TEMPLATES = _load()
"""Prompt augmentation's templates in the authors' order (name -> Template), family ->
description, and the other papers' fixed training prompts (name -> Template; module doc)."""


def get(name: str) -> Template:
    """A template of either kind by name."""
    found = TEMPLATES.get(name) or PAPER_TEMPLATES.get(name)
    if found is None:
        known = ", ".join([*TEMPLATES, *PAPER_TEMPLATES])
        raise TemplateError(f"unknown template {name!r}; known: {known}")
    return found


def format_score(name: str, response: str) -> float:
    """The format score in [0, 1] of `response` under template `name` (TemplateError if unknown)."""
    return get(name).rule.score(response)


def select(spec: str | Sequence[str] = "all") -> list[str]:
    """Template names from "all", or a list mixing template names and family names, in the
    authors' order without repeats; a paper's fixed prompt only by its own name, after the 13."""
    if isinstance(spec, str):
        spec = list(TEMPLATES) if spec == "all" else [spec]
    chosen: set[str] = set()
    for item in spec:
        if item in TEMPLATES or item in PAPER_TEMPLATES:
            chosen.add(item)
        elif item in FAMILIES:
            chosen.update(n for n, t in TEMPLATES.items() if t.family == item)
        else:
            raise TemplateError(
                f"{item!r} is neither a template nor a family; templates: {', '.join(TEMPLATES)}; "
                f"papers' fixed prompts: {', '.join(PAPER_TEMPLATES)}; families: {', '.join(FAMILIES)}"
            )
    if not chosen:
        raise TemplateError("no templates selected")
    return [n for n in [*TEMPLATES, *PAPER_TEMPLATES] if n in chosen]


def render_chatml(template: Template | str, question: str) -> str:
    """The prompt under plain ChatML (`<|im_start|>{role}\\n{content}<|im_end|>\\n` per message,
    then `<|im_start|>assistant\\n`), as a Qwen2.5 tokenizer renders it, plus the prefix."""
    t = get(template) if isinstance(template, str) else template
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in t.messages(question))
    return text + "<|im_start|>assistant\n" + t.assistant_prefix


def render(
    template: Template | str,
    question: str,
    tokenizer: Any,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The prompt text under `tokenizer`'s own chat template, plus the assistant prefix."""
    t = get(template) if isinstance(template, str) else template
    if not getattr(tokenizer, "chat_template", None):
        path = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise TemplateError(
            f"tokenizer {path!r} has no chat template: prompt augmentation renders templates through "
            "the model's chat template. Use an instruct/chat tokenizer, or set "
            "actor_rollout_ref.model.custom_chat_template"
        )
    kwargs = dict(chat_template_kwargs or {})
    try:
        text = tokenizer.apply_chat_template(
            t.messages(question), tokenize=False, add_generation_prompt=True, **kwargs
        )
    except Exception as e:  # jinja's TemplateError: e.g. "System role not supported"
        if "system" not in str(e).lower():
            raise
        merged = [{"role": "user", "content": f"{t.system}\n\n{question}{t.user_suffix}"}]
        text = tokenizer.apply_chat_template(merged, tokenize=False, add_generation_prompt=True, **kwargs)
    return text + t.assistant_prefix


def prompt_ids(
    template: Template | str,
    question: str,
    tokenizer: Any,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """Token ids of `render(...)`: the text is tokenized whole, with no extra special tokens (the
    chat template already wrote any BOS), as the authors tokenized their prompt strings."""
    return tokenizer.encode(
        render(template, question, tokenizer, chat_template_kwargs), add_special_tokens=False
    )


def _checks_text(rule: FormatRule) -> str:
    if not rule.checks:
        return "always 1.0"
    return " + ".join(f"{w:.2f}*once({s!r})" for s, w in rule.checks)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m prompt_aug.templates", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the templates, their families and format rules")
    show = sub.add_parser("show", help="print one template's prompt as the model sees it")
    show.add_argument("name", help="a template name (see `list`)")
    show.add_argument("--question", required=True)
    how = show.add_mutually_exclusive_group(required=True)
    how.add_argument("--tokenizer", metavar="PATH", help="a HF tokenizer (local folder or hub id)")
    how.add_argument("--chatml", action="store_true", help="plain ChatML, no tokenizer loaded")
    args = parser.parse_args(argv)

    try:
        if args.cmd == "list":
            width = max(map(len, TEMPLATES))
            for i, (name, t) in enumerate(TEMPLATES.items(), 1):
                print(f"{i:2d}  {name:<{width}}  {t.family:<12}  {_checks_text(t.rule)}")
            return 0
        if args.chatml:
            text = render_chatml(args.name, args.question)
        else:
            from transformers import AutoTokenizer

            text = render(args.name, args.question, AutoTokenizer.from_pretrained(args.tokenizer))
    except TemplateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    if sys.stdout.isatty() and not text.endswith("\n"):
        sys.stdout.write("\n")  # for the terminal only: piped output is the exact prompt
    return 0


if __name__ == "__main__":
    sys.exit(main())
