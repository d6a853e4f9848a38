"""Training recipes on verl: the Hydra entry point (`python -m recipes.train`), the CPU platform,
local model builders and data preparation."""
