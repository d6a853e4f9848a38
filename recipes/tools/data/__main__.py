"""`python -m recipes.tools.data`: see the package's docstring and docs/data.md."""

import sys

from recipes.tools.data.cli import main

if __name__ == "__main__":
    sys.exit(main())
