"""The code's shape stays as CONTRIBUTING.md's layout says: sizes and import rules (scripts/check_layout.py)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_file_and_function_sizes_and_import_rules():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_layout.py")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "all rules kept" in run.stdout
