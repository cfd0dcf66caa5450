"""The shared models: the auto tree (measured, cached or the fallback), runs that can compute, the model line."""
import pytest
from app_data import fake_choice, fake_loaded, form, make_run

from app.render.explain import how_it_works_md
from app.settings import AUTO, parse_settings, tree_presets
from app.state import UserState


def test_auto_is_the_fallback_until_this_device_is_measured_then_the_measured_tree(monkeypatch):
    import threading

    from app import runner
    from app.render.status import auto_note, model_line

    started, release = threading.Event(), threading.Event()

    def choose(target, drafter, mode, progress):
        progress(0.6, "timing verification and drafting on this device")
        started.set()
        release.wait(10)
        return fake_choice(mode)

    monkeypatch.setattr(runner, "cached_tree_choice", lambda target, drafter, mode: None)
    monkeypatch.setattr(runner, "choose_tree", choose)
    models = runner.Models("default", "default", "cpu")
    models._loaded = fake_loaded()
    measuring = threading.Thread(target=models.settle_auto_tree, args=(models.loaded,))
    measuring.start()
    assert started.wait(10)
    tree, label, why = models.auto_tree("gumiho")
    assert tree == tree_presets()["small (CPU)"] and label == "auto → small (CPU)"
    assert "until this device is measured: measuring now (gumiho drafting, 60%: timing verification" in why
    line = model_line(models)
    assert "measuring this device once" in line and "small (CPU)" in line and "/srv/secret" not in line
    ask = parse_settings(form(preset=AUTO), "cpu")
    assert models.settle(ask).preset == "auto → small (CPU)"  # a run does not wait
    release.set()
    measuring.join(10)
    assert models.settled.is_set() and set(models.choices) == {"gumiho", "serial"}
    settled = models.settle(ask)
    assert settled.tree.total_tokens == 12 and settled.preset == AUTO
    assert "auto tree for a test CPU" in settled.tree_source
    assert models.settle(parse_settings(form(method="serial", preset=AUTO), "cpu")).tree.mode == "serial"
    note = auto_note(models)
    assert note.count("auto tree for a test CPU") == 2 and "*serial:*" in note
    assert "12 nodes for gumiho" in model_line(models) and "heads from heads" in model_line(models)
    how = how_it_works_md(None, None, note)
    assert "**The draft tree.**" in how and "auto tree for a test CPU" in how


@pytest.mark.parametrize("policy,why", [("off", "--auto-tree off"), ("cached", "no measurement is cached")])
def test_auto_tree_policies_that_never_measure(monkeypatch, policy, why):
    from app import runner

    monkeypatch.setattr(runner, "cached_tree_choice", lambda target, drafter, mode: None)
    monkeypatch.setattr(runner, "choose_tree", lambda *a, **k: pytest.fail("measured"))
    models = runner.Models("default", "default", "cpu", auto_tree=policy)
    models._loaded = fake_loaded()
    models.settle_auto_tree(models.loaded)
    assert not models.choices and why in models.auto_tree("gumiho")[2]


def test_a_failed_measurement_keeps_the_fallback_and_says_why(monkeypatch):
    from app import runner

    def broken(*args, **kwargs):
        raise RuntimeError("out of luck at /opt/secret/autotree.py")

    monkeypatch.setattr(runner, "cached_tree_choice", lambda target, drafter, mode: None)
    monkeypatch.setattr(runner, "choose_tree", broken)
    models = runner.Models("default", "default", "cpu")
    models._loaded = fake_loaded()
    models.settle_auto_tree(models.loaded)
    tree, label, why = models.auto_tree("gumiho")
    assert label == "auto → small (CPU)" and "measuring failed" in why and "/opt" not in why


def test_paused_runs_beyond_the_limit_stop_computing_oldest_first():
    from types import SimpleNamespace

    from app.runner import MAX_LIVE_RUNS, Live, Models

    models = Models("default", "default", "cpu")
    lives = [Live(SimpleNamespace(done=False), None, None, models) for _ in range(MAX_LIVE_RUNS + 2)]
    for live in lives:
        models.keep_live(live)
    assert models.live_runs == MAX_LIVE_RUNS
    assert not lives[0].can_compute and not lives[1].can_compute and lives[2].can_compute
    user = UserState()
    user.reset(make_run(), lives[-1])
    user.close()  # the visitor left: its paused run lets go of its caches
    assert not lives[-1].can_compute and models.live_runs == MAX_LIVE_RUNS - 1 and user.live is None
