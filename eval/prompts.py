"""The prompt a question is evaluated with: its text and its token ids.

`render_prompt(template, problem, tokenizer)` renders a prompt_aug template through the model's chat
template, `none` (the question as the only user turn), `raw` (the question alone) or a paper
protocol's prompt (recipes/protocols.py PROMPTS); `prompt_token_ids` tokenizes it as the backends
receive it; `known_templates()` lists every name `--template` takes. Functions of their arguments
only: nothing is read from disk or written.
"""

from __future__ import annotations

from recipes import protocols

TEMPLATES_EXTRA = ("none", "raw", *protocols.PROMPTS)  # besides the 13 of prompt_aug


def render_prompt(template: str, problem: str, tokenizer) -> str:
    """The prompt text: a prompt-augmentation template through the model's chat template, `none`
    (the question as the only user turn of the chat template), `raw` (the question alone), or a
    paper protocol's prompt (recipes/protocols.py PROMPTS: through the chat template, or raw text)."""
    if template == "raw":
        return problem
    if template in protocols.PROMPTS:
        return protocols.PROMPTS[template].render(problem, tokenizer)
    if template == "none":
        messages = [{"role": "user", "content": problem}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    from prompt_aug.templates import render

    return render(template, problem, tokenizer)


def prompt_token_ids(template: str, problem: str, tokenizer) -> list[int]:
    """The prompt's token ids. A chat-templated prompt is tokenized without added special tokens (the
    chat template wrote any BOS); a protocol's raw-text prompt with them, as vLLM tokenizes the text
    prompt the authors gave it (Llama's BOS; Qwen adds none). `raw` keeps its old tokenization, which
    earlier results were made with."""
    fmt = protocols.PROMPTS.get(template)
    special = fmt is not None and not fmt.chat
    return tokenizer.encode(render_prompt(template, problem, tokenizer), add_special_tokens=special)


def known_templates() -> list[str]:
    """Every name `--template` takes: prompt_aug's templates, other papers' fixed training prompts
    (prompt_aug's PAPER_TEMPLATES, rendered the same way), and TEMPLATES_EXTRA."""
    from prompt_aug import templates

    return [*templates.TEMPLATES, *getattr(templates, "PAPER_TEMPLATES", {}), *TEMPLATES_EXTRA]
