"""Training recipes on verl: the Hydra entry point (`python -m recipes.train`), the CPU platform,
local model builders, data preparation, and TA-GRPO's rephrasing tool (`python -m recipes.rephrase`)."""
