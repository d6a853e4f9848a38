"""The methods a run combines: each declared once as data (`manifest.py`, read also by our verl
plugin and the planner), what a method does (`base.py`), the registry built from the declarations
(`registry.py`; `python -m recipes.methods.registry` lists every setting), the step that sets what
each active method implies after composition (`configure.py`), one module per method named as it is
declared, and the training reward's settings and formula (`reward.py`). Nothing here is a verl
class: the hooks verl calls are in recipes/extensions/."""
