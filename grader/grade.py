"""The old name of `rewards.grade`, kept for one release (it goes in the next): import `rewards.grade` instead."""

import importlib
import sys
import warnings

warnings.warn(
    "grader.grade is now rewards.grade; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = importlib.import_module("rewards.grade")
