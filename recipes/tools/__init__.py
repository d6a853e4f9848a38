"""Offline tools, each a CLI: data preparation and validation (`python -m recipes.tools.data`),
local models (`python -m recipes.tools.models`), TA-GRPO's rephrasings
(`python -m recipes.tools.rephrase`) and a run's memory and disk (`python -m recipes.plan`)."""
