"""Offline tools, each a CLI: data preparation and validation (`python -m recipes.tools.data`),
local models (`python -m recipes.tools.models`) and TA-GRPO's rephrasings
(`python -m recipes.tools.rephrase`). They import nothing of the training code above them."""
