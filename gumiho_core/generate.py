"""`python -m gumiho_core.generate ...`: decode one prompt from the command line (the code: gumiho_core/cli.py).

Importing this module runs nothing, and `gumiho_core.generate` stays the engine's generate() function
(gumiho_core/__init__.py, `_Package`, keeps the package attribute when this module is imported).
"""
import sys

if __name__ == "__main__":
    from gumiho_core.cli import main

    sys.exit(main())
