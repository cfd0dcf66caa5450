"""Every module of gumiho_core imports, and the package's `generate` stays the engine's function throughout."""
import importlib
import pkgutil
import subprocess
import sys

import gumiho_core
from gumiho_core import engine


def test_every_gumiho_core_module_imports():
    names = [m.name for m in pkgutil.walk_packages(gumiho_core.__path__, "gumiho_core.")]
    assert {"gumiho_core.generate", "gumiho_core.bench", "gumiho_core.train", "gumiho_core.cli"} <= set(names)
    for name in names:
        importlib.import_module(name)  # an ImportError here names the module
    assert gumiho_core.generate is engine.generate, "importing the CLI module gumiho_core.generate hid the function"


def test_generate_is_the_function_after_the_cli_module_is_imported():
    module = importlib.import_module("gumiho_core.generate")
    assert module is sys.modules["gumiho_core.generate"] and not hasattr(module, "main")  # it defines nothing
    assert gumiho_core.generate is engine.generate and callable(gumiho_core.generate)
    from gumiho_core import generate
    assert generate is engine.generate
    gumiho_core.__setattr__("other", 1)  # other attributes are set as usual
    assert gumiho_core.other == 1
    del gumiho_core.other


def test_python_m_gumiho_core_generate_help_runs():
    run = subprocess.run([sys.executable, "-m", "gumiho_core.generate", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: python -m gumiho_core.generate") and "--prompt" in run.stdout
    assert "Warning" not in run.stderr  # runpy warns when the module was imported before it runs
