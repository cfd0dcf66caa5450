"""scripts/check_draft_alignment.py runs end to end on the default pair, and its figures are consistent."""
import json
import re
import subprocess
import sys
from pathlib import Path

from app_data import needs_default

ROOT = Path(__file__).resolve().parent.parent


@needs_default
def test_the_alignment_check_prints_consistent_figures(tmp_path):
    out = subprocess.run([sys.executable, "scripts/check_draft_alignment.py", "--n", "2", "--tokens", "24", "--out",
                          str(tmp_path / "alignment.json")], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         check=True).stdout
    engine = re.search(r"acceptance per depth ([\d.]+) / ([\d.]+) / ([\d.]+) over (\d+) steps", out)
    drafted = re.search(r"as-drafted: top-1 per depth at the engine's (\d+) positions ([\d.]+) / ([\d.]+) / ([\d.]+)",
                        out)
    forced = re.search(r"against the actual tokens ([\d.]+) over (\d+) positions", out)
    assert engine and drafted and forced, out
    steps, positions = int(engine.group(4)), int(drafted.group(1))
    assert 0 < positions <= steps <= int(forced.group(2)) <= 2 * 24  # the engine drafts at answer positions
    # the same drafts judged twice: by the target in the engine, and by the as-drafted rollout at the engine's
    # positions; at depth 1 the two read the same inputs, and at depth 2 too once depth 1 was right
    for d in (1, 2):
        assert abs(float(engine.group(d)) - float(drafted.group(d + 1))) <= 0.15, out
    saved = json.loads((tmp_path / "alignment.json").read_text())  # what the model card reads (card._parity)
    assert saved["steps"] == steps and (saved["prompts"], saved["tokens"]) == (2, 24)
    assert [f"{x:.3f}" for x in saved["engine"]] == [engine.group(d) for d in (1, 2, 3)]
    assert [f"{x:.3f}" for x in saved["as-drafted"]] == [drafted.group(d) for d in (2, 3, 4)]
