"""`python -m gumiho_core.train ...`: the training command line (gumiho_core/training/cli.py)."""
import sys

from .training.cli import main

if __name__ == "__main__":
    sys.exit(main())
