"""The old name of `prompt_aug.sampling`, kept for one release (it goes in the next): import `prompt_aug.sampling` instead."""

import importlib
import sys
import warnings

warnings.warn(
    "prompt_templates.sampling is now prompt_aug.sampling; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = importlib.import_module("prompt_aug.sampling")
