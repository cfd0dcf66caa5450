"""The page's handlers driven directly with the default model (no server): runs, Stop, the API, failures."""
import json

import pytest
from app_data import fake_choice, form, needs_default

from app.player import Player
from app.render.stats import numbers
from app.settings import api_settings, parse_request
from app.stages import COMMITTED
from gumiho_core import AUTO, SMALL, TREE_PRESETS, GumihoError

PROMPT = "Name three colours of the rainbow."
PAPER_FLAGS = ["--top-k", "14", "--mlp-topk", "35", "--pruning", "35", "--total-tokens", "64", "--depth", "7"]


@pytest.fixture(scope="module")
def app_view():
    from app.backend import Backend
    from app.layout import build_view

    models = Backend("default", "default", "cpu")
    demo, view = build_view(models)
    return models, view


def cli_json(capsys, *argv) -> dict:
    from gumiho_core.cli import main

    assert main(["--prompt", PROMPT, "--json", "--device", "cpu", *PAPER_FLAGS, *argv]) == 0
    return json.loads(capsys.readouterr().out)


def run_handler(models, view, user, prompt=PROMPT, method="gumiho", max_new_tokens=12, fast=True,
                preset="small", compute=None, race=("gumiho-serial",)):
    """The Run event with the small tree; Gumiho's heads race in both modes (the default model's only trained
    heads) beside plain decoding: the visitor ticked `race`."""
    from app.handlers import on_race, on_run

    on_race(user, list(race))
    return on_run(view, models, compute, user, form(prompt=prompt, method=method, max_new_tokens=max_new_tokens,
                                                    preset=preset, fast=fast))


RUN_INPUTS = ["prompt", "method", "max-new-tokens", "temperature", "top-p", "seed", "preset", "tree-top_k",
              "tree-mlp_topk", "tree-pruning", "tree-total_tokens", "tree-depth", "delay", "fast"]


def test_the_run_event_takes_the_form_in_the_order_its_clients_send():
    """gradio_client callers of "run" send the form positionally (tests/test_concurrency.py): the page's
    components, and so the Form's fields, keep that order."""
    from app.backend import Backend
    from app.layout import build_view

    demo, view = build_view(Backend("default", "default", "cpu"))
    run = next(fn for fn in demo.fns.values() if fn.api_name == "run")
    assert run.inputs[0] is view.state
    assert [c.elem_id for c in run.inputs[1:]] == RUN_INPUTS


@needs_default
def test_pause_next_prev_resume_and_the_text_equals_the_clis(app_view, capsys):
    from app.animation import play
    from app.handlers import on_prev

    models, view = app_view
    user = Player()
    frames = run_handler(models, view, user)
    while user.cursor < 1:  # pictures (those of the race's other lanes among them) until step 1 is on screen
        next(frames)
    user.pause()  # what the Pause button does
    list(frames)
    assert not user.busy and user.can_compute and user.cursor >= 1
    at = user.cursor
    list(play(view, user, models, one_step=True))
    assert user.cursor == at + 1 and user.stage == COMMITTED
    on_prev(view, user)
    assert user.cursor == at
    last = list(play(view, user, models))[-1]
    assert user.run.finished and not user.can_compute and not user.busy
    cli = cli_json(capsys, "--max-new-tokens", "12")
    assert user.run.token_ids == cli["token_ids"] and user.run.text == cli["text"]
    assert user.run.baseline_ids[: len(cli["token_ids"])] == cli["token_ids"]  # the interleaved plain run
    assert last[view.answer] == cli["text"] and "gm-node" in last[view.tree] and last[view.speed] is not None
    steps = len(user.run.records) - 1
    assert numbers(user.run).main.tokens_per_pass == pytest.approx((len(cli["token_ids"]) - 1) / steps)


@needs_default
def test_every_picture_sets_every_output(app_view):
    """A component left out of a picture gets Gradio's generic update; alternating that with values makes
    each session's copy of the page grow at every step (Gradio 6.31). So no picture leaves one out."""
    models, view = app_view
    user = Player()
    frames = list(run_handler(models, view, user, max_new_tokens=12, fast=False))
    assert len(user.run.records) >= 3  # several animated steps, not only the first picture
    assert len(frames) > 8 and all(set(f) == set(view.outputs) for f in frames)


@needs_default
def test_stop_ends_the_run_and_keeps_what_was_shown(app_view):
    from app.handlers import on_stop

    models, view = app_view
    user = Player()
    frames = run_handler(models, view, user, max_new_tokens=30)
    for _ in range(3):
        next(frames)
    frames.close()  # what cancelling the event does to the generator
    out = on_stop(view, user)
    assert user.live is None and not user.busy and not user.can_compute and user.run.records
    assert "Stopped: showing step" in out[view.status]


@needs_default
def test_stop_during_a_lane_step_is_never_overwritten_by_that_steps_picture(app_view):
    """Stop's handler answers while the animation's lane-step still computes (cancelling waits for it); the
    picture that lane-step would yield comes after Stop's, so it must not say the run is still running (CI saw
    "Running ... catching up" stay on screen after Stop)."""
    from app.handlers import on_stop

    models, view = app_view
    user, real, said = Player(), Player.advance, []

    def advance(backend=None):  # after three pictures the visitor presses Stop while the next tick computes
        tick = real(user, backend)
        if len(said) == 3 and user.live is not None:
            said.append(on_stop(view, user)[view.status])
        return tick

    user.advance = advance
    for frame in run_handler(models, view, user, max_new_tokens=30):
        said.append(frame[view.status])
    assert len(said) > 4 and "Stopped: showing step" in said[3]
    assert all("Stopped: showing step" in line for line in said[3:]), said[3:]


@needs_default
@pytest.mark.parametrize("prompt,message", [("  ", "the prompt is empty"),
                                            ("sea " * 3000, "this app takes at most 2,048: shorten it.")])
def test_bad_prompts_are_refused_on_the_status_line_with_one_line_in_the_log(app_view, prompt, message, caplog):
    """Issue #52: a refusal stays on the status line (a toast faded), with advice a visitor can follow, and the
    server's log gets one line for it, not a traceback."""
    models, view = app_view
    user = Player()
    with caplog.at_level("INFO"):
        frames = list(run_handler(models, view, user, prompt=prompt))
    status = frames[-1][view.status]
    assert message in status and "Not run:" in status and "--max-prompt-tokens" not in status
    assert user.run is None and not user.busy and set(frames[-1]) == set(view.outputs)
    refused = [r for r in caplog.records if message.split(":")[0] in r.getMessage()]
    assert len(refused) == 1 and refused[0].exc_info is None


@needs_default
def test_the_api_endpoint_returns_what_the_cli_prints(app_view, capsys):
    from app.backend import api_generate

    models, _ = app_view
    for method in ("gumiho", "ar"):
        ours = api_generate(models, api_settings(PROMPT, method, 12, 0.0, 0, tree="paper"))
        cli = cli_json(capsys, "--method", method, "--max-new-tokens", "12")
        for key in ("token_ids", "text", "steps", "new_tokens", "mean_accept_len", "stop_reason"):
            assert ours[key] == cli[key], key
    assert ours["tree"] is None and models.step_lock.acquire(blocking=False)  # the lock was let go
    models.step_lock.release()


@needs_default
def test_the_api_uses_the_auto_tree_as_the_cli_does(app_view, monkeypatch):
    from app import backend

    models, _ = app_view
    choice = fake_choice(nodes=8)
    monkeypatch.setitem(models.auto.choices, "gumiho", choice)
    ours = backend.api_generate(models, api_settings(PROMPT, "gumiho", 12, 0.0, 0))
    assert ours["tree"] == choice.tree.to_dict() and ours["tree_source"] == choice.summary()
    paper = backend.api_generate(models, api_settings(PROMPT, "gumiho", 12, 0.0, 0, tree="paper"))
    assert ours["token_ids"] == paper["token_ids"] and paper["tree_source"] == "the authors' tree"


@needs_default
def test_a_run_with_preset_auto_says_which_tree_it_used(app_view):
    models, view = app_view
    user = Player()
    frames = list(run_handler(models, view, user, preset=AUTO, max_new_tokens=4))
    s = user.run.settings
    assert s.preset == "auto → small" and s.tree == TREE_PRESETS[SMALL]
    assert user.run.rival_trees["gumiho-serial"] == TREE_PRESETS[SMALL].with_(mode="serial")  # the same request
    assert any("tree <i>auto → small</i> (not measured here yet): 16 nodes" in str(f.get(view.status, ""))
               for f in frames)
    how = frames[-1][view.how]  # the run's names are escaped for Markdown (a backslash before each punctuation mark)
    assert "**The tree on screen.**" in how and "this device is not measured for gumiho yet" in how


def _lane_steps(run) -> int:
    return len(run.records) + len(run.baseline) + sum(len(r) for r in run.rivals.values())


@needs_default
def test_pause_cuts_the_race_between_any_two_lanes_and_it_goes_on_where_it_stopped(app_view):
    """A Player takes one lane-step per advance at most, so the animation can stop (Pause, Stop, a cancelled
    event) between any two lanes; a race paused anywhere ends as an uncut one does, and is then freed."""
    from app.backend import compute_run, start_run
    from app.render.race import race_html

    models, _ = app_view
    request = parse_request(form(prompt=PROMPT, max_new_tokens=12, preset="small"), ["gumiho-serial"])
    whole = compute_run(models, request)
    player, cuts = Player(fast=True), 0
    player.load(*start_run(models, request), models.live)
    while player.can_compute:
        player.begin()
        for _ in range(cuts % 3 + 1):  # the visitor pauses after 1, 2 or 3 ticks
            before = _lane_steps(player.run)
            if player.advance(models) is None:
                break
            assert _lane_steps(player.run) - before <= 1, "more than one lane-step between two pictures"
        player.pause()
        assert player.advance(models) is None  # nothing more once Pause came
        player.finish()
        cuts += 1
    run = player.run
    assert cuts >= 3 and player.live is None  # paused many times; the finished race let go of its decoders
    assert run.token_ids == whole.token_ids and run.baseline_ids == whole.baseline_ids
    for method, records in whole.rivals.items():
        assert [r.new_token_ids for r in run.rivals[method]] == [r.new_token_ids for r in records], method
        assert run.rivals[method][-1].done
    assert "Identical output" in race_html(run, len(run.records) - 1)


@needs_default
def test_the_animation_yields_after_every_lane_step(app_view):
    """A cancelled event (Stop, a closed tab) can only end a generator between two pictures: so a picture comes
    after every lane-step of the race, and a cancelled run computes one lane-step more at most."""
    models, view = app_view
    user, seen = Player(), []
    for _ in run_handler(models, view, user, max_new_tokens=12):
        seen.append(_lane_steps(user.run) if user.run is not None else 0)
    assert user.run.rivals and len(user.run.records) >= 3
    assert max(b - a for a, b in zip(seen, seen[1:])) == 1 and seen[-1] == _lane_steps(user.run)


@needs_default
def test_whole_run_mode_computes_first_then_shows_the_same_steps(app_view):
    from functools import partial

    from app.backend import Backend, compute_run

    models, view = app_view
    live, whole = Player(), Player()
    list(run_handler(models, view, live))
    once = Backend("default", "default", "cpu", whole_runs=True)
    once.loader = models.loader  # the same weights, computed the ZeroGPU way
    frames = list(run_handler(once, view, whole, compute=partial(compute_run, once)))
    assert whole.run.token_ids == live.run.token_ids and whole.run.text == live.run.text
    assert whole.live is None and len(once.live) == 0
    assert "Showing the computed steps of" in str(frames[2][view.status])


@needs_default
def test_a_drafter_of_another_target_leaves_plain_decoding_working(app_view, tmp_path):
    import torch
    from tiny import random_drafter, tiny_target

    from app.backend import Backend, start_run
    from app.render.status import model_line

    models, view = app_view
    small = tiny_target(seed=0)
    state = random_drafter(small).state_dict()
    state["embed_tokens.weight"] = small.shared_weights().embed
    torch.save(state, tmp_path / "pytorch_model.bin")
    other = Backend("default", str(tmp_path / "pytorch_model.bin"), "cpu")
    loaded = other.get()
    assert loaded.drafter is None and "belongs to another model" in loaded.drafter_error
    assert str(tmp_path) not in loaded.drafter_error and "…/pytorch_model.bin" in loaded.drafter_error
    assert "only plain decoding works" in model_line(other.status()) and other.methods() == ("ar",)
    run, live = start_run(other, parse_request(form(method="ar", max_new_tokens=3)))
    assert live.can_compute and not run.rivals  # the default race: only the drafters that load
    with pytest.raises(GumihoError, match="needs the gumiho drafter, which could not be loaded.*method ar"):
        start_run(other, parse_request(form(method="gumiho")))


@pytest.mark.parametrize("spec,message", [("/no/such/model", "target path '…/model' does not exist"),
                                          ("nobody/no-such-model", "could not load target 'nobody/no-such-model'")])
def test_a_target_that_cannot_load_is_reported_and_runs_say_so(monkeypatch, spec, message):
    from html import escape

    import huggingface_hub.constants

    from app.backend import Backend
    from app.layout import build_view
    from app.render.status import model_line

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # an unreachable hub, minus its retries
    models = Backend(spec, "default", "cpu")
    _, view = build_view(models)
    assert escape(message) in list(run_handler(models, view, Player()))[-1][view.status]
    assert "could not be loaded" in model_line(models.status()) and "Load run file" in model_line(models.status())
    assert models.loader.error and "/no/such" not in models.loader.error


@needs_default
def test_the_race_runs_eagle_and_medusa_lanes_where_their_heads_load():
    """Issue #50: with EAGLE-style and Medusa-style heads (untrained here: exact, just slow) the default race has a
    lane for each, on the same prompt and tree request, each its tree in its own mode."""
    from app.backend import Backend, compute_run
    from app.render.race import race_html

    dev = Backend("default", "default", "cpu", draft_for={"eagle": "untrained", "medusa": "untrained"})
    run = compute_run(dev, parse_request(form(prompt=PROMPT, max_new_tokens=6, preset="classroom")))
    assert list(run.rivals) == ["eagle", "medusa"] and run.settings.tree == TREE_PRESETS["classroom"]
    assert run.rival_trees == {"eagle": TREE_PRESETS["classroom"].with_(mode="serial"),
                               "medusa": TREE_PRESETS["classroom"]}
    eagle, medusa = run.rivals["eagle"][1], run.rivals["medusa"][1]
    assert {p.name for p in eagle.phases} >= {"serial1", "serial2", "serial3"} and set(eagle.tree.proposer) <= {
        "root", *(f"serial{d}" for d in range(1, 8))}
    assert [p.name for p in medusa.phases] == ["parallel"] and "mlp1" in medusa.tree.proposer
    assert "Identical output" in race_html(run, len(run.records) - 1)
    assert any(n.startswith("EAGLE-2 style: untrained heads") for n in run.notes)
    shipped = dev.get().drafters["gumiho"].steps  # the shipped Gumiho heads' card says how long they trained
    assert shipped > 0 and run.trained_steps == {"gumiho": shipped, "eagle": 0, "medusa": 0}
    assert "trained for different numbers of optimizer steps" in race_html(run, len(run.records) - 1)
