"""The old name of `rewards.extract`, kept for one release (it goes in the next): import `rewards.extract` instead."""

import importlib
import sys
import warnings

warnings.warn(
    "grader.extract is now rewards.extract; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = importlib.import_module("rewards.extract")
