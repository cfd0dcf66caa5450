"""The race, time-per-step and what-if views, on hand-made runs whose numbers can be worked out by hand."""
from dataclasses import replace

import pytest
from app_data import TREE, make_run, prefill, record, with_rival

from app.render.lanes import lanes
from app.render.phases import part_look
from app.render.race import race_figure, race_html
from app.render.stats import numbers
from app.render.timing import timing_figure
from app.render.whatif import predict, whatif_figure, whatif_html
from gumiho_core import StepCosts, flat_curve, measured_curve, what_if

# app_data's TREE with its verdict: the target's argmax after each node is (11, 13, 21, 16, 20, 20, 17, 20), so
# nodes 1, 3, 6, 7 (a chain) are right and 2, 4, 5 wrong. By score the best nodes are 1, 3, 6, 7, 4, 2, 5.
ACCEPTED_BY_SIZE = (1, 2, 3, 4, 4, 4, 4)  # drafted tokens accepted with n = 2..8 nodes


def _runs():
    """A gumiho run of two steps (2.0 s), its EAGLE-style rival (2.6 s) and plain decoding (9 tokens, 1.8 s)."""
    mine = [prefill(), replace(record(1, total=4), compute_s=1.0),
            replace(record(2, accepted=(0, 1, 3, 6, 7), total=9, done=True, reason="max_new_tokens"), compute_s=2.0)]
    run = make_run(records=mine, clock=[r.compute_s for r in mine], baseline=[(n, 0.2 * n) for n in range(1, 10)])
    run.rivals = {"eagle": [replace(r, compute_s=1.3 * r.compute_s) for r in mine]}
    return run


def test_what_if_reads_every_smaller_tree_off_the_verdicts():
    rec = record()
    result = what_if([rec], True, StepCosts(plain_s=0.1, draft_s=0.06, commit_s=0.01),
                     [flat_curve(), measured_curve("cpu", {"4": 0.2, "8": 0.4}, 0.1)])
    assert result.sizes == tuple(range(2, 9)) and result.exact
    assert result.tokens_per_step == pytest.approx([1 + a for a in ACCEPTED_BY_SIZE])
    flat = result.speedup[flat_curve().name]
    assert flat[3] == pytest.approx(5 * 0.1 / (0.06 + 0.1 + 0.01))  # 5 nodes: 4 accepted + the bonus
    cpu = result.speedup["cpu"]  # verify(8 nodes) = 4 plain steps on this curve; verify(6) interpolates to 3
    assert cpu[6] == pytest.approx(5 * 0.1 / (0.06 + 0.4 + 0.01)) and cpu[4] == pytest.approx(5 * 0.1 / 0.37)


def test_when_sampling_the_what_if_is_the_expected_acceptance():
    rec = record()
    probs = (1.0, 0.5, 0.1, 0.4, 0.2, 0.3, 0.5, 0.5)  # the target's p of each node given its parent
    rec = replace(rec, verdict=replace(rec.verdict, target_prob=probs))
    result = what_if([rec], False, StepCosts(0.1, 0.0, 0.0), [flat_curve()])
    reach = {1: 0.5, 3: 0.2, 6: 0.1, 7: 0.05, 4: 0.1, 2: 0.1, 5: 0.03}  # products along each node's path
    want, total = [], 0.0
    for node in (1, 3, 6, 7, 4, 2, 5):
        total += reach[node]
        want.append(1 + total)
    assert not result.exact and result.tokens_per_step == pytest.approx(want)


def test_the_lanes_finish_in_the_order_of_their_speeds_with_phases_a_verdict_and_identical_output():
    run = _runs()
    shown = lanes(run, 2)
    assert [lane.method for lane in shown] == ["gumiho", "eagle", "ar"] and all(lane.finished for lane in shown)
    assert [lane.end for lane in shown] == pytest.approx([2.0, 2.6, 1.8])
    assert [lane.tokens for lane in shown] == [9, 9, 9]
    step = shown[0].steps[1]  # gumiho's first decoding step: S1, S2, the MLP heads, verify, commit
    assert [p.key for p in step.parts] == ["serial1", "serial2", "parallel", "verify", "commit"]
    fig = race_figure(run, 2)
    finish = [a.text for a in fig.layout.annotations if a.text.endswith(" s</b>")]
    assert finish == ["<b>2.00 s</b>", "<b>2.60 s</b>", "<b>1.80 s</b>"]
    assert "+3" in {t for bar in fig.data for t in bar.text}  # the step that added 3 tokens says so
    lanes_named = [t.replace("<b>", "").replace("</b>", "").split("<br>")[0] for t in fig.layout.yaxis.ticktext]
    assert lanes_named == ["Plain decoding", "EAGLE-2 style", "Gumiho"]  # bottom lane first
    words = race_html(run, 2)
    assert "🏁 <b>Plain decoding won</b>, 0.20 s (10%) ahead of Gumiho" in words
    assert "Gumiho: 9 tokens in 2.00 s, 0.90× plain decoding" in words and "so far" not in words
    assert "Identical output" in words
    run.rivals["eagle"][-1] = replace(run.rivals["eagle"][-1], new_token_ids=(20, 20, 20, 20, 21))
    assert "The outputs differ" in race_html(run, 2)


def test_the_race_says_whether_its_drafters_had_the_same_training_budget():
    run = _runs()
    assert "optimizer steps" not in race_html(run, 2)  # the heads do not say (an older file): nothing claimed
    run.trained_steps = {"gumiho": 4000, "eagle": 4000}
    assert "Every drafter here was trained for 4,000 optimizer steps: an equal budget." in race_html(run, 2)
    run.trained_steps = {"gumiho": 7000, "eagle": 300}
    assert ("trained for different numbers of optimizer steps (Gumiho 7,000, EAGLE-2 style 300): this race "
            "compares these heads, not the methods at an equal budget.") in race_html(run, 2)
    run.trained_steps = {"gumiho": 7000}  # one lane's heads unknown: no claim either way
    assert "optimizer steps" not in race_html(run, 2)


def test_the_legend_lists_only_the_phases_the_run_used_each_in_a_colour_of_its_own():
    fig = race_figure(_runs(), 2)
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert legend == [part_look(k).label for k in ("prefill", "serial1", "serial2", "parallel", "verify", "commit",
                                                    "plain")]  # no S3, no choosing (no time left after the phases)
    fixed = {part_look(k).colour for k in ("prefill", "select", "commit", "plain", "verify")}
    assert len(fixed) == 5  # prefill, choosing the tree, commit and the plain step were four greys


def test_the_inset_magnifies_one_step_of_each_lane_split_by_phase():
    run = with_rival(make_run())
    fig = race_figure(run, 2)
    inset = {t.name: dict(zip(t.y, t.x)) for t in fig.data if t.xaxis == "x2"}
    drafting = part_look("parallel").label
    assert inset[drafting] == {2: pytest.approx(30)}  # Gumiho's lane on top: the MLP heads' 30 ms a pass
    assert inset[part_look("serial3").label] == {1: pytest.approx(10)}  # EAGLE-style's third serial step
    assert numbers(run).lane("eagle").draft_ms == pytest.approx(60)  # four serial steps, then choosing: 20 ms


def test_mid_run_each_lane_shows_as_far_as_it_had_got_and_the_words_say_so_far():
    run = _runs()
    run.records[2] = replace(run.records[2], done=False)
    shown = lanes(run, 1)  # step 1 on screen: 4 tokens
    assert [lane.tokens for lane in shown] == [4, 4, 4] and not any(lane.finished for lane in shown)
    assert "So far <b>" in race_html(run, 1) and "so far" in race_html(run, 1)


def test_time_per_step_stacks_the_phases_of_every_step():
    fig = timing_figure(_runs(), 2)
    bars = {b.name: list(b.y) for b in fig.data if b.type == "bar"}
    assert sum(sum(y) for y in bars.values()) == pytest.approx(2 * 1000 * (0.06 + 0.1 + 0.01))
    assert bars["M: the MLP heads, all at once (one pass)"] == pytest.approx([30, 30])
    plain = [t for t in fig.data if t.type == "scatter"]
    assert plain[0].name == "one plain step: 200 ms"


def test_the_what_if_view_checks_its_prediction_against_the_run():
    run = _runs()
    p = predict(run, 2)
    n = numbers(run).main
    assert p.nodes == len(TREE) and p.measured.tokens_per_pass == pytest.approx(4.0)  # 3 then 5 tokens
    assert p.measured.speedup == pytest.approx(n.speedup) == pytest.approx(1.8 / 2.0)  # the boxes' speedup
    fig = whatif_figure(run, 2)
    names = [t.name for t in fig.data]
    assert any("this run's own verify cost" in (n or "") for n in names) and any("GPU-like" in (n or "") for n in names)
    run.verify_ratios = {8: 4.0, 22: 9.0}  # this device measured: its own curve
    assert any("measured verify cost" in (t.name or "") for t in whatif_figure(run, 2).data)
    assert "verify(n) as measured on this device" in whatif_html(run, 2)
    note = whatif_html(run, 2)
    assert "A prediction, not a measurement" in note and f"measured <b>{n.speedup:.2f}×</b>" in note
