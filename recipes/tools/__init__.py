"""Offline tools, each a CLI: data preparation and validation (`python -m recipes.tools.data`),
local models (`python -m recipes.tools.models`) and TA-GRPO's rephrasings
(`python -m recipes.tools.rephrase`). A run's memory and disk plan is the entry point's
`python -m recipes.plan`."""
