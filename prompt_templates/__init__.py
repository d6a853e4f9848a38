"""The old name of `prompt_aug`, kept for one release (it goes in the next): import `prompt_aug` instead."""

import warnings

import prompt_aug
from prompt_aug import *  # noqa: F403

warnings.warn(
    "prompt_templates is now prompt_aug; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    return getattr(prompt_aug, name)
