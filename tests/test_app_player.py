"""The Player without models: the race's schedule as a pure function of the lanes' progress, and the player's
commands (Pause, Stop, Next, Prev, Replay, a new run, eviction) on recorded runs and stand-in decoders."""
import random
import threading
import time
from types import SimpleNamespace

import gradio as gr
import pytest
from app_data import make_run

from app.backend import BASELINE, MAIN, Lane, Live, LiveRuns, next_lane
from app.player import STAGE, WAIT_SLICE_S, Player
from app.stages import COMMITTED, stages


def lanes(main, *others, done=()) -> dict:
    """Lane progress: MAIN's tokens, then each other lane's ("gumiho", BASELINE ...) as (name, tokens)."""
    return {name: Lane(tokens, name in done) for name, tokens in [(MAIN, main), *others]}


@pytest.mark.parametrize("progress, due", [
    (lanes(0, ("serial", 0), (BASELINE, 0)), MAIN),  # the prefill comes first
    (lanes(3, ("serial", 1), (BASELINE, 0)), "serial"),  # the lanes behind catch up, in order
    (lanes(3, ("serial", 3), (BASELINE, 2)), BASELINE),
    (lanes(3, ("serial", 4), (BASELINE, 3)), MAIN),  # none behind: the run's own step
    (lanes(3, ("serial", 1), (BASELINE, 0), done={"serial"}), BASELINE),  # a lane that ended is skipped
    (lanes(9, ("serial", 9), (BASELINE, 4), done={MAIN}), "serial"),  # the run ended: the others run to their ends,
    (lanes(9, ("serial", 11), (BASELINE, 4), done={MAIN, "serial"}), BASELINE),  # one after the other
    (lanes(9, ("serial", 12), (BASELINE, 12), done={MAIN, "serial", BASELINE}), None),
    (lanes(5), MAIN), ({}, None),  # plain decoding races nobody; no lanes: nothing to do
])
def test_the_lane_due_next_follows_from_the_lanes_progress_alone(progress, due):
    assert next_lane(progress) == due


def test_a_race_run_by_the_schedule_interleaves_the_lanes_step_by_step():
    """Lanes that commit different numbers of tokens per step: before each of the run's own steps, every other
    unfinished lane has caught up with it; at the end every lane has reached its end."""
    per_step = {MAIN: [1, 3, 2, 4, 1], "serial": [1, 2, 2, 2, 2, 1], BASELINE: [1] * 11}
    taken = {name: 0 for name in per_step}
    order = []
    while (lane := next_lane({n: Lane(sum(s[:taken[n]]), taken[n] == len(s)) for n, s in per_step.items()})):
        if lane == MAIN:
            main = sum(per_step[MAIN][:taken[MAIN]])
            assert all(sum(s[:taken[n]]) >= main or taken[n] == len(s) for n, s in per_step.items())
        taken[lane] += 1
        order.append(lane)
    assert taken == {name: len(s) for name, s in per_step.items()}
    assert order[:4] == [MAIN, "serial", BASELINE, MAIN]


def stand_in_live() -> Live:
    return Live(SimpleNamespace(done=False, generated=[]), SimpleNamespace(done=False, generated=[]), None)


def test_a_replay_shows_every_stage_once_and_next_shows_one_step():
    player = Player()
    player.load(make_run())
    player.begin()
    shown = []
    while (tick := player.advance()) is not None:
        assert tick.shows == STAGE and tick.wait and tick.charts == (player.stage == COMMITTED)
        shown.append((player.cursor, player.stage))
    assert shown == [(i, s) for i, rec in enumerate(player.run.records) for s in stages(rec)]
    player.finish()
    player.replay()
    player.begin(one_step=True)
    while player.advance() is not None:
        pass
    assert (player.cursor, player.stage) == (0, COMMITTED)
    player.finish()
    player.fast = True
    player.begin(one_step=True)
    assert player.advance() is not None and player.advance() is None and player.cursor == 1


def test_pause_ends_the_animation_and_prev_steps_back():
    player = Player()
    player.load(make_run())
    player.begin()
    player.advance()
    player.advance()
    player.pause()
    assert player.advance() is None
    player.finish()
    at = player.cursor
    player.prev()
    assert player.cursor == max(at - 1, 0) and player.stage == COMMITTED and not player.busy


def test_stop_frees_the_decoders_at_once_and_nothing_computes_after_it():
    registry = LiveRuns()
    player = Player()
    live = stand_in_live()
    player.load(make_run(), live, registry)
    assert player.can_compute and len(registry) == 1
    player.begin()
    player.stop()
    assert live.session is None and live.baseline is None and player.live is None and len(registry) == 0
    assert player.advance() is None and not player.busy and player.stopped
    player.finish()
    assert player.stage == COMMITTED and not player.more_to_show or player.cursor + 1 < len(player.run.records)


def test_a_new_run_or_the_visitor_leaving_frees_the_runs_decoders():
    registry = LiveRuns()
    player, first, second = Player(), stand_in_live(), stand_in_live()
    player.load(make_run(), first, registry)
    player.load(make_run(), second, registry)
    assert first.session is None and player.live is second and len(registry) == 1
    player.close()
    assert second.session is None and len(registry) == 0


def test_stop_while_a_run_starts_ends_it_before_its_first_step():
    player, live = Player(), stand_in_live()
    player.starting()
    player.stop()  # pressed while the decoders are being made
    player.load(make_run(), live, LiveRuns())
    assert live.session is None and not player.can_compute and player.stopped


def _playing(player: Player, mp):
    """play() on `player` with pictures as (cursor, stage, status line): no view, no models."""
    from app.animation import play

    mp.setattr("app.animation.picture", lambda v, p, message, charts=True: (p.cursor, p.stage, message))
    mp.setattr("app.animation.describe", lambda p: "paused" if p.more_to_show else "ended")
    return lambda **kw: play(SimpleNamespace(), player, **kw)


def _until(condition) -> None:
    while not condition():
        time.sleep(0.001)


def test_a_second_animation_waits_for_the_first_and_the_last_click_wins(monkeypatch):
    """Resume pressed while Next's one step still animates (the click came before the buttons turned off): one
    animation advances the player at a time. The running one ends at its next tick without a last picture of
    its own; the later one then plays from where it stopped, to the end of the run."""
    frames = {"next": [], "resume": []}
    player = Player(delay=0.01)
    player.load(make_run())
    play = _playing(player, monkeypatch)
    next_one = play(one_step=True)
    frames["next"].append(next(next_one))  # Next's first stage is on screen; its animation goes on
    resume = threading.Thread(target=lambda: frames["resume"].extend(play()))
    resume.start()
    _until(lambda: player.superseded(1))  # Resume has asked and waits for Next's animation to end
    frames["next"].extend(next_one)
    resume.join(timeout=10)
    assert not resume.is_alive()
    assert [f[2] for f in frames["next"]] == [frames["next"][0][2]]  # ended at its next tick, no last picture
    shown = [f[:2] for f in frames["resume"][:-1]]
    assert shown[0] != frames["next"][0][:2] and len(set(shown)) == len(shown)  # on from there, each stage once
    assert frames["resume"][-1][2] == "ended" and (player.cursor, player.stage) == (len(player.run.records) - 1,
                                                                                   COMMITTED)
    assert not player.busy


def test_a_click_taken_over_while_it_waits_changes_nothing_on_screen(monkeypatch):
    """Two clicks while an animation runs: the first of them, still waiting, is taken over by the second and
    answers with no change at all (Gradio's skip); only the second plays."""
    player = Player(delay=0.01)
    player.load(make_run())
    play = _playing(player, monkeypatch)
    running = play(one_step=True)
    next(running)
    answers = {}
    waiting = threading.Thread(target=lambda: answers.setdefault("second", list(play())))
    waiting.start()
    _until(lambda: player.superseded(1))
    last = threading.Thread(target=lambda: answers.setdefault("third", list(play())))
    last.start()
    _until(lambda: player.superseded(2))
    list(running)
    waiting.join(timeout=10)
    last.join(timeout=10)
    assert answers["second"] == [gr.skip()]
    assert answers["third"][-1][2] == "ended" and not player.busy


def test_a_click_taken_over_never_pauses_the_animation_that_took_over():
    """A waiting click that a later one has taken over stops asking for the running animation to end: were it
    still waiting when the later one begins, it would pause that one at its first tick. Which waiter wakes first
    is up to the threads, so the scenario runs many times, with the waiters' polls at random phases."""
    rng = random.Random(18)
    for _ in range(20):
        player = Player(delay=0.01)
        player.load(make_run())
        first = player.begin()
        numbers = {}
        waiters = [threading.Thread(target=lambda k=k: numbers.setdefault(k, player.begin()), daemon=True)
                   for k in (2, 3)]
        waiters[0].start()
        _until(lambda: player.superseded(first))
        time.sleep(rng.uniform(0, WAIT_SLICE_S))
        waiters[1].start()
        _until(lambda: player.superseded(2))
        time.sleep(rng.uniform(0, WAIT_SLICE_S))
        player.finish(first)
        waiters[1].join(timeout=10)
        time.sleep(0.15)  # three of the waiters' polls: long enough for a stale one to act
        waiters[0].join(timeout=10)
        assert numbers == {2: None, 3: 3} and player.halt is None and player.advance() is not None
