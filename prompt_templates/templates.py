"""The old name of `prompt_aug.templates`, kept for one release (it goes in the next): import `prompt_aug.templates` instead."""

import importlib
import runpy
import sys
import warnings

if __name__ == "__main__":  # `python -m prompt_templates.templates`: the program under its new name
    print(
        "note: prompt_templates.templates is now prompt_aug.templates; the old name goes in the next release",
        file=sys.stderr,
    )
    runpy.run_module("prompt_aug.templates", run_name="__main__", alter_sys=True)
else:
    warnings.warn(
        "prompt_templates.templates is now prompt_aug.templates; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    sys.modules[__name__] = importlib.import_module("prompt_aug.templates")
