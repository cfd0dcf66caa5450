"""What all visitors share (app.backend): the auto tree (measured, cached or the fallback), runs that can
compute, and the server's status as the model line shows it."""
from dataclasses import replace

import pytest
from app_data import fake_choice, fake_loaded, form, make_run

from app.player import Player
from app.render.explain import how_it_works_md
from app.settings import AUTO, parse_settings, tree_presets


def test_auto_is_the_fallback_until_this_device_is_measured_then_the_measured_tree(monkeypatch):
    import threading

    from app.backend import Backend, auto_tree
    from app.render.status import auto_note, model_line

    started, release = threading.Event(), threading.Event()

    def choose(target, drafter, mode, progress, **_):  # refresh, lock
        progress(0.6, "timing verification and drafting on this device")
        started.set()
        release.wait(10)
        return fake_choice(mode)

    monkeypatch.setattr(auto_tree, "cached_tree_choice", lambda target, drafter, mode: None)
    monkeypatch.setattr(auto_tree, "choose_tree", choose)
    models = Backend("default", "default", "cpu")
    models.loader._loaded = fake_loaded()
    measuring = threading.Thread(target=models.auto.settle_all, args=(models.loader.loaded,))
    measuring.start()
    assert started.wait(10)
    pick = models.auto_tree("gumiho")
    assert pick.tree == tree_presets()["small (CPU)"] and pick.preset == "auto → small (CPU)"
    assert "until this device is measured: measuring now (gumiho drafting, 60%: timing verification" in pick.why
    line = model_line(models.status())
    assert "measuring this device once" in line and "small (CPU)" in line and "/srv/secret" not in line
    ask = parse_settings(form(preset=AUTO), "cpu")
    assert models.settle(ask).preset == "auto → small (CPU)"  # a run does not wait
    release.set()
    measuring.join(10)
    assert models.status().final and set(models.auto.choices) == {"gumiho", "serial"}
    settled = models.settle(ask)
    assert settled.tree.total_tokens == 12 and settled.preset == AUTO
    assert "auto tree for a test CPU" in settled.tree_source
    assert models.settle(parse_settings(form(method="serial", preset=AUTO), "cpu")).tree.mode == "serial"
    note = auto_note(models.status())
    assert note.count("auto tree for a test CPU") == 2 and "*serial:*" in note
    line = model_line(models.status())
    assert "12 nodes for gumiho" in line and "heads from heads" in line
    how = how_it_works_md(None, None, note)
    assert "**The draft tree.**" in how and "auto tree for a test CPU" in how


@pytest.mark.parametrize("policy,why", [("off", "--auto-tree off"), ("cached", "no measurement is cached")])
def test_auto_tree_policies_that_never_measure(monkeypatch, policy, why):
    from app.backend import Backend, auto_tree

    monkeypatch.setattr(auto_tree, "cached_tree_choice", lambda target, drafter, mode: None)
    monkeypatch.setattr(auto_tree, "choose_tree", lambda *a, **k: pytest.fail("measured"))
    models = Backend("default", "default", "cpu", auto_tree=policy)
    models.loader._loaded = fake_loaded()
    models.auto.settle_all(models.loader.loaded)
    assert not models.auto.choices and why in models.auto_tree("gumiho").why


def test_a_failed_measurement_keeps_the_fallback_and_says_why(monkeypatch):
    from app.backend import Backend, auto_tree

    def broken(*args, **kwargs):
        raise RuntimeError("out of luck at /opt/secret/autotree.py")

    monkeypatch.setattr(auto_tree, "cached_tree_choice", lambda target, drafter, mode: None)
    monkeypatch.setattr(auto_tree, "choose_tree", broken)
    models = Backend("default", "default", "cpu")
    models.loader._loaded = fake_loaded()
    models.auto.settle_all(models.loader.loaded)
    pick = models.auto_tree("gumiho")
    assert pick.preset == "auto → small (CPU)" and "measuring failed" in pick.why and "/opt" not in pick.why


def test_paused_runs_beyond_the_limit_stop_computing_oldest_first():
    from types import SimpleNamespace

    from app.backend import MAX_LIVE_RUNS, Backend, Live

    models = Backend("default", "default", "cpu")
    players = [Player() for _ in range(MAX_LIVE_RUNS + 2)]
    for player in players:
        player.load(make_run(), Live(SimpleNamespace(done=False, generated=[]), None, None), models.live)
    assert len(models.live) == MAX_LIVE_RUNS
    assert not players[0].can_compute and not players[1].can_compute and players[2].can_compute
    assert players[0].run is not None and players[0].more_to_show  # its recorded steps stay, to browse
    last, live = players[-1], players[-1].live
    last.close()  # the visitor left: its paused run lets go of its caches
    assert live.session is None and last.live is None and len(models.live) == MAX_LIVE_RUNS - 1


def test_the_api_waits_for_a_measurement_on_its_way_and_a_run_does_not(monkeypatch):
    import threading

    from app.backend import Backend, auto_tree

    monkeypatch.setattr(auto_tree, "cached_tree_choice", lambda target, drafter, mode: None)
    monkeypatch.setattr(auto_tree, "choose_tree", lambda target, drafter, mode, progress, **_: fake_choice(mode))
    models = Backend("default", "default", "cpu")
    models.loader._loaded = fake_loaded()
    models.auto.expected = True  # what start_background() says before its thread settles the auto tree
    ask = parse_settings(form(preset=AUTO), "cpu")
    assert models.settle(ask).preset == "auto → small (CPU)"
    later = threading.Timer(0.2, models.auto.settle_all, args=(models.loader.loaded,))
    later.start()
    assert models.settle(ask, wait=True).preset == AUTO  # waited for the measurement, like the CLI
    later.join()


def test_the_model_line_while_loading_and_without_a_drafter():
    from app.backend import Backend
    from app.render.status import model_line

    models = Backend("default", "default", "cpu")
    status = models.status()
    assert not status.ready and not status.final and "Loading the model default on cpu" in model_line(status)
    models.loader._loaded = replace(fake_loaded(), drafter=None, drafter_error="…/heads.bin is for another model")
    line = model_line(models.status())
    assert "Model: <b>tiny-llama</b> on cpu" in line and "⚠ not loaded (…/heads.bin is for another model)" in line
    assert "only plain decoding (ar) works" in line
