"""What verl must find registered in every one of its processes (driver, task runner, actor and
rollout workers, reward loop): loaded through our `verl.plugins` entry point on `import verl`.

Order matters: the "cpu" platform is registered before anything asks verl for its platform.
verl swallows a plugin's import error at DEBUG level, so tests/test_verl_integration.py checks in
a fresh interpreter that every name below is registered.
"""

import os

from recipes import cpu_platform

cpu_platform.register_rollout()
if os.environ.get("VERL_PLATFORM") == "cpu":
    cpu_platform.install()

import rewards.verl_manager  # noqa: E402,F401  (registers the "math_pool" reward manager)
import recipes.trainer  # noqa: E402,F401  (registers the "recipes_sync" trainer)
