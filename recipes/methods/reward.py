"""The old name of `rewards.training` (the training reward's formula) and
`recipes.reward_settings` (its settings), kept for one release (it goes in the next). Not a method:
nothing registers it."""

import warnings

from recipes.reward_settings import *  # noqa: F403
from recipes.reward_settings import DAPO, SECTION, RewardSettings, settings  # noqa: F401
from rewards.training import overlong_penalty, training_reward  # noqa: F401

warnings.warn(
    "recipes.methods.reward is now rewards.training (the formula) and recipes.reward_settings "
    "(its settings); the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
