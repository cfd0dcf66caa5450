"""scripts/generalization_gap.py: three disjoint sets of the corpus through the trainer's own validation."""
import json
import subprocess
import sys
from pathlib import Path

from app_data import needs_default

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = [sys.executable, "scripts/generalization_gap.py"]


def test_a_folder_without_a_training_record_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"format": "gumiho-drafter"}))
    for draft, says in ((tmp_path / "missing", "is not a drafter folder"), (tmp_path, "does not say how")):
        run = subprocess.run(SCRIPT + ["--draft", str(draft)], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert run.returncode == 2 and says in run.stderr and "Traceback" not in run.stderr, run.stderr


@needs_default
def test_each_set_is_drawn_and_validated_head_by_head(tmp_path):
    out = tmp_path / "gap.json"
    printed = subprocess.run(SCRIPT + ["--n", "6", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                             timeout=900, check=True).stdout
    figures = json.loads(out.read_text())
    assert set(figures) == {"trained-on", "held-out", "new"}
    for name, f in figures.items():
        assert f["conversations"] == 6 and f["answer_tokens"] > 6 * 10, (name, f)
        assert all(0 <= f[f"{h}_top1"] <= f[f"{h}_top10"] <= 1 for h in ("serial", "serial2", "mlp1", "mlp5")), f
        assert 0 < f["loss"] < 100, f
    assert "| mlp1 |" in printed and "top-1 gap" in printed
