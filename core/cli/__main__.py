"""``python -m core.cli``: the same command as the ``opsgate`` console script."""

import sys

from core.cli import main

if __name__ == "__main__":  # importing the module (a walk over the packages) runs nothing
    sys.exit(main())
