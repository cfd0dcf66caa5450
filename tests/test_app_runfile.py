"""Run files: export, load with every field checked, and the view on a loaded run."""
import json
import math
import re

import pytest
from app_data import make_run

from app import runfile
from app.render.stats import run_stats
from app.player import Player
from app.state import Settings
from gumiho_core import DecodeConfig, TreeConfig


# -- run files -----------------------------------------------------------------------------------
def test_a_run_file_round_trips(tmp_path):
    run = make_run()
    run.settings = Settings("Write a poem.", "gumiho", DecodeConfig(max_new_tokens=9), TreeConfig(), "auto",
                            "auto tree for this CPU: 16 nodes")
    path = tmp_path / "run.json"
    path.write_text(runfile.dumps(run), encoding="utf-8")
    assert "NaN" not in path.read_text()  # plain JSON, readable by any tool
    back = runfile.read(str(path))
    assert json.dumps([r.to_dict() for r in back.records]) == json.dumps([r.to_dict() for r in run.records])
    assert math.isnan(back.records[1].verdict.target_prob[5])
    assert back.pieces == run.pieces and back.clock == pytest.approx(run.clock)
    assert back.baseline == [(n, pytest.approx(t)) for n, t in run.baseline]
    assert back.settings == run.settings and back.text == run.text and back.special_ids == {99}
    assert run_stats(back).mean_accept_len == run_stats(run).mean_accept_len


def _broken(change) -> str:
    data = runfile.to_dict(make_run())
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize("text,message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a run file of this app"),
    (_broken(lambda d: d.update(version=99)), "version 99 is not supported"),
    (_broken(lambda d: d.update(records="x")), "field 'records' must be a list"),
    (_broken(lambda d: d["records"][1].pop("verdict")), "a speculative step needs a tree and a verdict"),
    (_broken(lambda d: d["records"][1].pop("index")), "step 1 lacks the field 'index'"),
    (_broken(lambda d: d["records"][1]["verdict"].update(accepted=[0, 2, 3])), "not a path of its tree"),
    (_broken(lambda d: d["records"][1]["verdict"].update(accepted=[0, 1, 9])), "not a path of its tree"),
    (_broken(lambda d: d["records"][1]["verdict"].update(target_token=[1])), "does not cover every node"),
    (_broken(lambda d: d["records"][1].update(total_new_tokens=3)), "does not add up"),
    (_broken(lambda d: d["records"][1]["tree"].update(parents=[5] * 8)), "tree.parents must each name an earlier"),
    (_broken(lambda d: d["records"].reverse()), "out of order"),
    (_broken(lambda d: d.update(clock=[0.1])), "has 1 times for 3 steps"),
    (_broken(lambda d: d.update(clock=[0.3, 0.2, 0.1])), "must not go back in time"),
    (_broken(lambda d: d["decode"].update(temperature=-3)), "settings are invalid: temperature"),
    (_broken(lambda d: d.update(records=[])), "no steps"),
    (_broken(lambda d: d.update(pieces={"x": 1})), "field 'pieces'"),
    (_broken(lambda d: d["records"][1]["verdict"].update(target_prob=["0.5"] * 8)),
     "verdict.target_prob[0] must be a number or null; found text '0.5'"),
    (_broken(lambda d: d["records"][1]["verdict"].update(target_prob=[True] * 8)), "must be a number or null"),
    (_broken(lambda d: d["records"][1]["verdict"].update(target_prob=[1.5] * 8)), "must be a finite number in [0, 1]"),
    (_broken(lambda d: d.update(tree_source=3)), "field 'tree_source' must be text; found a whole number 3"),
    (_broken(lambda d: d.update(clock=[0.1, 0.2, 12345.5])).replace("12345.5", "NaN"),
     "not valid JSON (NaN is not JSON)"),
])
def test_a_malformed_run_file_gives_a_clear_message(text, message):
    with pytest.raises(runfile.RunFileError, match=re.escape(message)):
        runfile.loads(text)


def test_a_run_file_saved_before_the_auto_tree_still_loads():
    data = runfile.to_dict(make_run())
    del data["tree_source"]
    assert runfile.loads(json.dumps(data)).settings.tree_source == ""


def test_an_oversized_or_binary_run_file_is_refused_before_parsing(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (runfile.MAX_BYTES + 1))
    with pytest.raises(runfile.RunFileError, match="at most 5 MB"):
        runfile.read(str(big))
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(runfile.RunFileError, match="not UTF-8"):
        runfile.read(str(binary))


def test_the_view_knows_what_is_left_to_show():
    user = Player()
    assert not user.more_to_show
    user.load(make_run())
    user.cursor = 1
    assert user.more_to_show and not user.can_compute
    user.cursor = 2
    assert not user.more_to_show
