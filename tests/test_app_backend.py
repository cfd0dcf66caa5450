"""What all visitors share (app.backend): this device's measured trees (measured, cached, or the fallback; only
when asked), the drafters of the family, runs that can compute, and the server's status as the model line shows
it."""
import threading
import time
from dataclasses import replace

import pytest
from app_data import fake_choice, fake_loaded, form, make_run

from app.player import Player
from app.render.explain import how_it_works_md
from app.settings import parse_request
from gumiho_core import AUTO, SMALL, TREE_PRESETS, GumihoError


def _measuring_backend(monkeypatch, choose, cached=lambda target, drafter, mode: None, **options):
    """A Backend on fake models whose measurement calls `choose` in a thread (no process, no real model)."""
    from app.backend import Backend, auto_tree, measuring

    monkeypatch.setattr(auto_tree, "cached_tree_choice", cached)
    monkeypatch.setattr(measuring, "choose_tree", choose)
    models = Backend("default", "default", "cpu", **options)
    models.auto.isolate = False
    models.loader._loaded = fake_loaded()
    return models


def test_auto_is_the_fallback_until_this_device_is_measured_then_the_measured_tree(monkeypatch):
    from app.backend import settle
    from app.render.status import measure_note, model_line

    started, release = threading.Event(), threading.Event()

    def choose(target, drafter, mode, progress, **_):  # refresh, lock
        progress(0.6, "timing verification and drafting on this device")
        started.set()
        release.wait(10)
        return fake_choice(mode)

    models = _measuring_backend(monkeypatch, choose)
    measuring = threading.Thread(target=models.auto.settle_all, args=(models.loader.loaded,))
    measuring.start()
    assert started.wait(10)
    tree = models.resolve(AUTO, "gumiho")
    assert tree.tree.with_(mode="hybrid") == TREE_PRESETS[SMALL].with_(mode="hybrid") and tree.preset == "auto → small"
    assert "measuring now: Gumiho 60%: timing verification" in tree.source
    line = model_line(models.status())
    assert "Model: <b>tiny-llama</b>" in line and "/srv/secret" not in line  # the model line stays the model's
    assert "Measuring this device once, in the background: Gumiho 60%" in line
    ask = parse_request(form(preset=AUTO))
    assert settle(models, ask).preset == "auto → small"  # a run does not wait
    release.set()
    measuring.join(10)
    assert models.status().final and set(models.auto.choices) == {"gumiho", "gumiho-serial"}
    settled = settle(models, ask)
    assert settled.tree.total_tokens == 12 and settled.preset == AUTO and "auto tree for a test CPU" in settled.tree_source
    assert settle(models, parse_request(form(method="gumiho-serial", preset=AUTO))).tree.mode == "serial"
    note = measure_note(models.status())
    assert note.count("auto tree for a test CPU, 1 thread:") == 2 and "*Gumiho transformer at every depth:*" in note
    assert "1 threads" not in note and "`" not in note  # the engine's words, in the page's
    line = model_line(models.status())
    assert "Measured on this device: auto tree Gumiho 12 nodes" in line and "Gumiho heads from heads (7,000 training steps)" in line
    how = how_it_works_md(None, None, "**classroom**: a tree to read")
    assert "**The draft tree.** **classroom**" in how


@pytest.mark.parametrize("policy,why", [("off", "--auto-tree off"), ("cached", "none is cached")])
def test_auto_tree_policies_that_never_measure(monkeypatch, policy, why):
    models = _measuring_backend(monkeypatch, lambda *a, **k: pytest.fail("measured"), auto_tree=policy)
    models.auto.settle_all(models.loader.loaded)
    assert not models.auto.choices and why in models.resolve(AUTO, "gumiho").source


def test_a_failed_measurement_keeps_the_fallback_and_says_why(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("out of luck at /opt/secret/autotree.py")

    models = _measuring_backend(monkeypatch, broken)
    models.auto.settle_all(models.loader.loaded)
    tree = models.resolve(AUTO, "gumiho")
    assert tree.preset == "auto → small" and "measuring failed" in tree.source and "/opt" not in tree.source


def test_a_run_far_from_the_prediction_is_noted_and_nothing_is_measured_again(monkeypatch):
    """Issue #52: a class is never interrupted by a measurement it did not ask for."""
    from app.backend import settle
    from app.render.status import model_line

    calls = []
    models = _measuring_backend(monkeypatch, lambda *a, **k: calls.append(a) or fake_choice())
    models.auto.settle_all(models.loader.loaded)
    assert len(calls) == 2  # gumiho, gumiho-serial: once, when the models load
    run = make_run()
    run.settings = settle(models, parse_request(form(preset=AUTO)))
    run.records = [run.records[0]] + [replace(run.records[1], draft_s=0.4) for _ in range(10)]  # dear steps
    run.baseline = [(n, 0.05 * n) for n in range(1, 12)]
    note = models.auto.judge(run)
    assert "more (against a plain step) than this device's measurement predicted" in note
    assert "Measure this device again" in note and len(calls) == 2 and not models.auto._busy.locked()
    assert "may be out of date" in model_line(models.status())


def test_a_measurement_waits_while_a_visitor_acts():
    """The gate a measurement holds around each timed call lets the page have the machine first."""
    from app.backend.measuring import Gate, Quiet, StepLock

    quiet, lock = Quiet(), StepLock()
    quiet.touch()  # a visitor acts
    start = time.monotonic()
    with Gate(lock, quiet):
        waited = time.monotonic() - start
        assert lock.locked()  # and then it holds the step lock: no visitor's step runs while it times a call
    assert waited >= 1.9 and not lock.locked()  # QUIET_S (2 s) of quiet first
    shared = lock.share()  # a measuring process shares the lock from then on
    with lock:
        assert not shared.acquire(block=False)


def test_a_measuring_process_that_dies_holding_the_lock_does_not_hold_the_page():
    from app.backend.measuring import StepLock

    lock, stepped = StepLock(), threading.Event()
    lock.share().acquire()  # the process takes it for a timed call, and dies there

    def step():
        with lock:
            stepped.set()

    threading.Thread(target=step, daemon=True).start()
    assert not stepped.wait(0.5)  # a visitor's step waits for the timed call
    lock.unshare()  # the process has ended (measuring.in_process)
    assert stepped.wait(2) and not lock.locked()


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
    from app.backend import settle

    models = _measuring_backend(monkeypatch, lambda target, drafter, mode, progress, **_: fake_choice(mode))
    models.auto.expected = True  # what start_background() says before its thread settles the trees
    ask = parse_request(form(preset=AUTO))
    assert settle(models, ask).preset == "auto → small"
    later = threading.Timer(0.2, models.auto.settle_all, args=(models.loader.loaded,))
    later.start()
    assert settle(models, ask, wait=True).preset == AUTO  # waited for the measurement, like the CLI
    later.join()


def test_the_model_line_while_loading_and_without_drafters():
    from app.backend import Backend
    from app.render.status import model_line

    models = Backend("default", "default", "cpu")
    status = models.status()
    assert not status.ready and not status.final and "Loading the model default on cpu" in model_line(status)
    models.loader._loaded = replace(fake_loaded(), drafters={},
                                    drafter_errors={"gumiho": "…/heads.bin is for another model"})
    line = model_line(models.status())
    assert "Model: <b>tiny-llama</b> on cpu" in line and "Gumiho heads could not be loaded (…/heads.bin" in line
    assert "only plain decoding works" in line and models.methods() == ("ar",)


def test_methods_whose_heads_do_not_ship_are_not_offered_and_the_page_says_why():
    from app.backend import Backend
    from app.render.status import missing_words

    models = Backend("default", "default", "cpu")
    assert models.methods() == ("gumiho", "gumiho-serial", "ar")  # before the load: what should load
    models.loader._loaded = fake_loaded()
    assert models.methods() == ("gumiho", "gumiho-serial", "ar")
    assert missing_words(models.status()) == ("EAGLE-2-style and Medusa-style heads are not trained yet for this "
                                              "model.")
    dev = Backend("default", "default", "cpu", draft_for={"eagle": "untrained", "medusa": "untrained"})
    assert dev.methods() == ("gumiho", "eagle", "medusa", "gumiho-serial", "ar")


def test_drafter_specs_from_the_flags():
    from app.backend import drafter_specs, parse_draft_for

    assert parse_draft_for(["eagle=untrained,medusa=untrained", ""]) == {"eagle": "untrained", "medusa": "untrained"}
    assert drafter_specs("untrained", {"eagle": "/x"}) == {"gumiho": "untrained", "eagle": "/x", "medusa": "default"}
    with pytest.raises(GumihoError, match="member=spec"):
        parse_draft_for(["eagle"])
    with pytest.raises(GumihoError, match="the drafters are gumiho, eagle, medusa"):
        drafter_specs("default", {"hydra": "untrained"})


def test_the_classroom_tree_says_what_it_costs_here_once_measured(monkeypatch):
    from app.render.status import tree_note

    models = _measuring_backend(monkeypatch, lambda target, drafter, mode, progress, **_: fake_choice(mode))
    before = tree_note(models.status(), "classroom")
    assert "S1, S2 and the MLP heads M1–M5 all show in every step" in before
    assert "What verifying 22 tokens costs on this machine is not measured yet" in before
    models.auto.settle_all(models.loader.loaded)  # verify: 12 tokens 1.6 plain steps, 24 tokens 3.0
    after = tree_note(models.status(), "classroom")
    assert "Verifying 22 tokens costs ~2.8× a plain step here (measured)." in after
    assert "**fastest**: the fastest measured tree of any depth" in tree_note(models.status(), "fastest")
