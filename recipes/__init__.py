"""Training recipes on verl, one folder per kind of code (docs/layout.md):

- train.py, compose.py, checks.py, console.py, run_folder.py: `python -m recipes.train` (compose,
  check before Ray, prepare, run); plan.py: `python -m recipes.plan`, a run's memory and disk; runs.py:
  `python -m recipes.runs`, runs' status and their curves compared
- settings.py, reward_settings.py, files.py, checkpoints.py: the ground (typed settings, the training
  reward's settings, atomic files and the cache,
  checkpoint step folders)
- methods/: each method's settings, checks, math and hooks, and their registry
- extensions/: what verl loads (plugins, trainer, agent loop, reward manager)
- platforms/: CPU, vLLM on CPU, GPU preflight, determinism, weight sync
- tools/: offline CLIs (data, local models, rephrasings)
"""

import warnings

# verl's engine registry warns on import about every optional training engine it cannot load
# (torchtitan, veomni, megatron, ...); the recipes use none of them.
warnings.filterwarnings("ignore", message=r"\w+ engine is not available", category=UserWarning)
