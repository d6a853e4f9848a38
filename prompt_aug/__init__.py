"""Prompt augmentation's templates (Lu, Huang, Balestriero 2026, arXiv 2602.03190;
docs/methods.md#prompt-augmentation).

  templates.py   the 13 templates and format rules (data in templates.json), rendering, CLI
  sampling.py    which template each rollout gets: a pure function of (seed, epoch, row, rollout)

The method (its settings, checks and hooks) is recipes/methods/prompt_aug.py; the agent loop that
applies the templates in training is recipes/extensions/agent_loop.py; the training reward
(rewards/training.py) adds the template's format score to accuracy. The old package name
`prompt_templates` works for one release.
"""

PAPER = "Lu, Huang, Balestriero 2026, arXiv 2602.03190"
