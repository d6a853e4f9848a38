"""Training recipes on verl: the Hydra entry point (`python -m recipes.train`), the CPU platform,
local model builders, data preparation, and TA-GRPO's rephrasing tool (`python -m recipes.rephrase`)."""

import warnings

# verl's engine registry warns on import about every optional training engine it cannot load
# (torchtitan, veomni, megatron, ...); the recipes use none of them.
warnings.filterwarnings("ignore", message=r"\w+ engine is not available", category=UserWarning)
