"""`python -m gumiho_core.train ...`: the training command line (gumiho_core/training/cli.py), run with tcmalloc
where the system has it (gumiho_core/training/allocator.py)."""
import sys

from .training.allocator import run_with_tcmalloc
from .training.cli import main

if __name__ == "__main__":
    run_with_tcmalloc()
    sys.exit(main())
