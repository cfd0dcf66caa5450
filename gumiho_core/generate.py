"""`python -m gumiho_core.generate ...`: decode one prompt from the command line (the code: gumiho_core/cli.py).

Run it, never import it: `gumiho_core.generate` is the engine's generate() function, and importing a
submodule of the same name would put the module in its place. So an import fails, and says so.
"""
import sys

if __name__ != "__main__":
    raise ImportError("gumiho_core.generate is the engine's generate() function; the command line is "
                      "`python -m gumiho_core.generate` and its code is in gumiho_core.cli")

from .cli import main  # noqa: E402  (only once we know this runs as a program)

sys.exit(main())
