"""`python -m gumiho_core.bench ...`: the benchmark's command line (gumiho_core/measure/bench.py)."""
import sys

from .measure.bench import main

if __name__ == "__main__":
    sys.exit(main())
