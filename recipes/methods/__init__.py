"""The methods a run combines: what a method is (`base.py`), the registry of every method
(`registry.py`, `python -m recipes.methods.registry` lists every setting), one module per method
named as the registry names it, and the training reward's settings and formula (`reward.py`).
Nothing here is a verl class: the hooks verl calls are in recipes/extensions/."""
