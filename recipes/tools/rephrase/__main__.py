"""`python -m recipes.tools.rephrase`: see the package's docstring and docs/rephrase.md."""

import sys

from recipes.tools.rephrase.cli import main

if __name__ == "__main__":
    sys.exit(main())
