"""The old name of `rewards`, kept for one release (it goes in the next): import `rewards` instead."""

import warnings

import rewards
from rewards import *  # noqa: F403

warnings.warn(
    "grader is now rewards; the old name goes in the next release", DeprecationWarning, stacklevel=2
)


def __getattr__(name: str):
    return getattr(rewards, name)
