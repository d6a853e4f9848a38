"""The old name of `rewards.training` (the training reward), kept for one release (it goes in the
next): import `rewards.training` instead. Not a method: nothing registers it."""

import importlib
import sys
import warnings

warnings.warn(
    "recipes.methods.reward is now rewards.training; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = importlib.import_module("rewards.training")
