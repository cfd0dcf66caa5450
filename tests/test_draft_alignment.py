"""scripts/check_draft_alignment.py runs end to end on the default pair and its three figures are consistent."""
import re
import subprocess
import sys
from pathlib import Path

from app_data import needs_default

ROOT = Path(__file__).resolve().parent.parent


@needs_default
def test_the_alignment_check_prints_consistent_figures():
    out = subprocess.run([sys.executable, "scripts/check_draft_alignment.py", "--n", "2", "--tokens", "24"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, check=True).stdout
    engine = re.search(r"depth-1 acceptance ([\d.]+) over (\d+) steps", out)
    forced = re.search(r"against the actual tokens ([\d.]+) over (\d+) positions, ([\d.]+) at the (\d+) positions", out)
    assert engine and forced, out
    steps, positions, drafted = int(engine.group(2)), int(forced.group(2)), int(forced.group(4))
    assert 0 < drafted <= steps and drafted <= positions <= 2 * 24  # the engine drafts at answer positions
    # the same drafts judged twice: by the target in the engine, and teacher-forced at the engine's positions
    assert abs(float(engine.group(1)) - float(forced.group(3))) <= 0.15, out
