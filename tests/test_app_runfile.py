"""Run files: export, load with every field checked, and the view on a loaded run."""
import json
import math
import re

import pytest
from app_data import make_run, with_rival

from app import runfile
from app.player import Player
from app.render.lanes import lanes
from app.render.stats import numbers
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
    assert _summary(back) == _summary(run)
    assert json.loads(path.read_text())["version"] == 1  # no other drafting lane: the first version, as before


def _broken(change) -> str:
    data = runfile.to_dict(make_run())
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize("text,message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a run file of this app"),
    (_broken(lambda d: d.update(version=99)), "version 99 is not supported (this app reads 1 and 2)"),
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


def test_a_race_file_keeps_every_lane_and_replays_the_whole_race(tmp_path):
    run = with_rival(make_run())
    data = json.loads(runfile.dumps(run))
    assert data["version"] == 2 and [lane["method"] for lane in data["lanes"]] == ["eagle"]
    assert data["lanes"][0]["tree"]["mode"] == "serial" and data["baseline_done"] is True
    back = runfile.loads(json.dumps(data))
    assert back.rival_trees == run.rival_trees
    assert [[r.to_dict() for r in back.rivals["eagle"]]] == [[r.to_dict() for r in run.rivals["eagle"]]]
    assert [lane.method for lane in lanes(back, 2)] == ["gumiho", "eagle", "ar"]
    assert _summary(back) == _summary(run)
    assert back.trained_steps == {}  # the heads did not say: the file claims nothing
    run.trained_steps = {"gumiho": 7000, "eagle": 300}
    again = runfile.loads(runfile.dumps(run))
    assert again.trained_steps == {"gumiho": 7000, "eagle": 300}


def test_a_race_too_long_for_one_file_is_saved_without_its_other_lanes(monkeypatch):
    """Every file the page writes it reads back: a race whose lanes would break the file's limits keeps the run and
    plain decoding, with a note naming the lanes left out."""
    run = with_rival(make_run())
    whole = runfile.dumps(run)
    monkeypatch.setattr(runfile, "MAX_BYTES", len(whole.encode()) - 1)  # the race alone is over the limit
    text = runfile.dumps(run)
    data = json.loads(text)
    assert data["version"] == 1 and "lanes" not in data and len(text.encode()) <= runfile.MAX_BYTES
    assert "other lanes (eagle) were left out" in data["notes"][-1]
    back = runfile.loads(text)
    assert not back.rivals and [r.to_dict() for r in back.records] == [r.to_dict() for r in run.records]


def _summary(run) -> list:
    """Every lane's numbers as the panels show them (the file rounds times to microseconds)."""
    return [(n.method, n.tokens, n.steps, n.reached, n.accepted, round(n.speedup, 3), round(n.seconds, 3))
            for n in numbers(run).lanes]


@pytest.mark.parametrize("change, message", [
    (lambda d: d["lanes"].append(dict(d["lanes"][0])), "a second lane of method 'eagle'"),
    (lambda d: d["lanes"][0].update(method="gumiho"), "a second lane of method 'gumiho' (the run's own"),
    (lambda d: d["lanes"][0].update(method="ar"), "lane 0: field 'method' must be one of gumiho, eagle"),
    (lambda d: d["lanes"][0]["records"][1].update(index=5), "lane eagle: step 1 of the run file says it is step 5"),
    (lambda d: d["lanes"][0]["records"][1]["tree"].update(proposer=["root"] + ["mlp1"] * 7),
     "lane eagle: step 1: tree.proposer[1] is text 'mlp1'"),
    (lambda d: d.update(trained_steps={"medusa": 5}), "'trained_steps' names method 'medusa', which is neither"),
    (lambda d: d.update(trained_steps={"eagle": -1}), "trained_steps"),
    (lambda d: d.update(trained_steps={"eagle": "many"}), "trained_steps"),
])
def test_a_race_files_lanes_are_checked_like_the_run(change, message):
    data = json.loads(runfile.dumps(with_rival(make_run())))
    change(data)
    with pytest.raises(runfile.RunFileError, match=re.escape(message)):
        runfile.loads(json.dumps(data))


def test_a_first_version_file_of_an_older_app_still_loads():
    """A run file of before the race's lanes, its preset by an old name and its method by its old name."""
    data = runfile.to_dict(make_run("serial"))
    data.update(preset="small (CPU)", method="serial")
    data["tree"]["mode"] = "gumiho"
    back = runfile.loads(json.dumps(data))
    assert back.settings.method == "gumiho-serial" and back.settings.preset == "small (CPU)" and not back.rivals
    assert back.settings.tree.mode == "hybrid" and back.baseline_done


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
