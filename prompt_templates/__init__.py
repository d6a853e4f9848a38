"""Prompt augmentation (Lu, Huang, Balestriero 2026, arXiv 2602.03190; docs/methods.md#prompt-augmentation).

  templates.py   the 13 templates and format rules (data in templates.json), rendering, CLI
  sampling.py    which template each rollout gets: a pure function of (seed, epoch, row, rollout)

The agent loop that applies them in training is recipes/extensions/agent_loop.py; the training reward
(recipes/methods/reward.py) adds the template's format score to accuracy.
"""
