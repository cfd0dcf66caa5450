"""The numbers of a run and the charts drawn from them (pure functions, no server): one function, stats.numbers,
that every panel reads, so the panels agree, also on a run that ends on <|im_end|>."""
import re

import pytest
from app_data import ends_on_im_end, make_run, prefill, record, with_rival

from app.render.charts import accept_figure, depth_figure, speed_figure, speedup_figure
from app.render.committed import committed
from app.render.early import early, early_html
from app.render.explain import how_it_works_md, numbers_html, step_caption
from app.render.race import race_figure, race_html
from app.render.stats import numbers, running_speedup, time_to
from app.render.text_view import output_html, token_origins
from app.render.tree_view import tree_svg
from app.render.whatif import whatif_figure, whatif_html
from app.stages import COMMITTED, VERIFIED
from gumiho_core import StepRecord


def test_numbers_match_the_engine_definitions():
    run = make_run()
    n = numbers(run).main
    assert n.tokens == 9 and n.steps == 2 and n.tokens_per_pass == pytest.approx((9 - 1) / 2)
    assert n.reached == (2, 2, 2, 1) and n.accepted == (2, 2, 1, 1)  # the tree's 4 depths, no more
    assert n.seconds == pytest.approx(0.6) and n.tokens_per_s == pytest.approx(9 / 0.6)
    assert numbers(run).same is True and numbers(run).ended
    assert n.speedup == pytest.approx(time_to(run.baseline, 9) / 0.6) == pytest.approx(1.0 / 0.6)


def test_running_speedup_uses_plain_decodings_time_to_the_same_token_count():
    run = make_run()
    assert running_speedup(run, 2) == [(1, pytest.approx(1.0)), (4, pytest.approx(0.5 / 0.4)),
                                       (9, pytest.approx(1.0 / 0.6))]
    assert running_speedup(run, 2)[-1][1] == pytest.approx(numbers(run).main.speedup)  # the boxes' speedup
    assert time_to(run.baseline, 10) is None


def test_numbers_of_an_earlier_step_and_of_plain_decoding():
    assert numbers(make_run(), upto=1).main.tokens == 4
    ar = make_run("ar", records=[prefill()] + [StepRecord(i, "autoregressive", None, (), None, (20,), 0, 0.1, 0,
                                                          i + 1, i, 0, False, None) for i in range(1, 4)],
                  baseline=[])
    n = numbers(ar)
    assert n.main.speedup == 1.0 and n.main.tokens_per_pass == 1.0 and n.plain is n.main


def test_a_step_cut_at_the_end_of_the_text_commits_only_what_the_text_holds():
    last = ends_on_im_end().records[-1]
    got = committed(last)
    assert got.nodes == (1, 3) and got.cut == (6,) and not got.bonus and got.tokens == len(last.new_token_ids) == 2
    assert token_origins(last) == ["serial1", "serial2"]  # no MLP head, no target token after <|im_end|>


def test_every_panel_gives_the_same_numbers_for_a_run_that_ends_on_im_end():
    """Issue #52: 39 tokens in one box and 38 in another, 2.24 vs 2.35 tokens per pass, 1.07x vs 1.12x. Here: 6
    tokens (the prefill's, 3, then " sea" and <|im_end|>), 2 passes, 2.5 tokens per pass, one speedup."""
    run = ends_on_im_end()
    end = len(run.records) - 1
    n = numbers(run).main
    assert (n.tokens, n.steps, n.tokens_per_pass, n.without_bonus) == (6, 2, 2.5, 1)
    speed = f"{n.speedup:.2f}×"
    boxes = numbers_html(numbers(run))
    assert ">2.50<" in boxes and speed in boxes and "6 tokens: the prefill's first, then 5 in 2 passes" in boxes
    assert f"6 tokens in {n.seconds:.2f} s, {speed[:-1]}× plain decoding" in race_html(run, end)
    assert race_figure(run, end).layout.yaxis.ticktext[-1].endswith(f"6 tokens · {n.seconds:.2f} s")
    how = how_it_works_md(run, numbers(run))
    assert "**2.50 tokens per pass**" in how and f"**{speed}**" in how and "wrote 6 tokens" in how
    assert "1 + 1.00 + 1.00 − 0.50 (the last pass ended the text before the target's own token) = **2.50**" in how
    assert "(the run's 2.50 tokens per pass, plus 0.50 for the last pass" in early_html(run, end)
    assert f"measured <b>{speed}</b>" in whatif_html(run, end)
    stars = [a.text for a in whatif_figure(run, end).layout.annotations if a.text.startswith("measured")]
    assert stars == ["measured 2.50", f"measured {speed}"]
    assert "(mean 2.50)" in accept_figure(run, end).layout.title.text
    assert sum(sum(bar.y) for bar in accept_figure(run, end).data) == 5  # the tokens after the prefill
    assert output_html(run.records, run.pieces, run.special_ids).count('class="gm-t') == 6


def test_the_last_step_shows_nothing_after_im_end_as_kept():
    run = ends_on_im_end()
    last = run.records[-1]
    svg = tree_svg(last, run.pieces, COMMITTED)
    assert "★" not in svg.split("target\u2019s own ★", 1)[1]  # no bonus drawn: the text ended at <|im_end|>
    assert "no token of the target\u2019s own follows" in svg
    assert "accepted, but after the end of the text: not kept" in svg  # the MLP token after it
    verdict = step_caption(last, VERIFIED, run.pieces, run.prompt_tokens)
    assert "accepts 2 drafted tokens" in verdict and "the accepted “·waves” after it" in verdict
    assert "2 tokens “·sea&lt;|im_end|&gt;” join the text" in step_caption(last, COMMITTED, run.pieces, run.prompt_tokens)


def test_early_tokens_matter_by_the_runs_own_rates():
    lane = numbers(make_run()).main  # rates by depth: 1, 1, 0.5, 1
    view = early(lane)
    assert view.adds == pytest.approx((1, 1, 0.5, 0.5))
    assert view.expected == pytest.approx(3.0) and 1 + view.expected == pytest.approx(lane.tokens_per_pass)
    # 0.05 x dE/dp_j, dE/dp_j = sum over i >= j of the products without p_j
    assert view.gains[0] == pytest.approx(0.05 * (1 + 1 + 0.5 + 0.5))  # every term depends on depth 1
    assert view.gains[2] == pytest.approx(0.05 * (1 + 1))  # depth 3: terms 3 and 4 without p_3
    assert view.gains[3] == pytest.approx(0.05 * 0.5)  # the last depth: its own term only


def test_charts_have_every_lane_and_only_the_depths_used():
    run = with_rival(make_run())
    assert [t.name for t in speed_figure(run, 2).data] == ["Gumiho", "EAGLE-2 style", "Plain decoding"]
    assert list(speedup_figure(run, 2).data[0].y) == pytest.approx([1.0, 1.25, 1 / 0.6])
    bars = {t.name: list(t.y) for t in accept_figure(run, 2).data}
    assert bars["S1"] == [1, 1] and bars["M2"] == [0, 1] and bars["T"] == [1, 1]
    depth = depth_figure(run, 2)
    assert [b.name for b in depth.data] == ["Gumiho", "EAGLE-2 style"]
    assert list(depth.data[0].y) == [1.0, 1.0, 0.5, 1.0] and tuple(depth.layout.xaxis.tickvals) == (1, 2, 3, 4)
    assert list(depth.data[1].y) == [0.5, 0, 0, 0]  # the rival kept depth 1 once in two passes


@pytest.mark.parametrize("records", [[prefill()], [prefill(), record(1, total=4)]])
def test_charts_of_a_short_run_have_their_own_axes_not_plotlys_defaults(records):
    run = make_run(records=records, baseline=[])
    depth = depth_figure(run, len(records) - 1).layout
    assert depth.xaxis.range[0] == 0.5 and tuple(depth.yaxis.range) == (0, 1.35)
    speedup = speedup_figure(run, len(records) - 1).layout
    assert speedup.xaxis.range[0] == 0 and speedup.xaxis.range[1] > 0


def test_numbers_and_how_it_works_use_the_runs_values():
    run = make_run()
    n = numbers(run)
    assert "1.67×" in numbers_html(n) and "4.00" in numbers_html(n)
    assert numbers_html(None).count("–") == 4
    md = how_it_works_md(run, n)
    assert "**4.00 tokens per pass**" in md and "1.67×" in md and "identical" in md
    assert "Speculative decoding" in how_it_works_md(None, None)
    assert "`" not in md and not re.search(r"\b1 threads\b", md)


@pytest.mark.parametrize("dtype, words, absent", [
    ("float32", "DIFFER from plain decoding's from new token 3 on ✗. The target runs in float32, where they must be "
                "identical: this is a bug, please report it.", "half-precision"),
    ("bfloat16", "part from plain decoding's from new token 3 on. The target runs in bfloat16: a tree pass and a "
                 "one-token pass round differently", "please report"),
    ("", "does not say the target's dtype: in fp32 that is a bug (please report it); in bf16 or fp16", "DIFFER"),
])
def test_the_exactness_line_says_what_a_difference_means_in_the_targets_dtype(dtype, words, absent):
    run = make_run()
    run.dtype = dtype
    run.baseline_ids[2] += 1  # plain decoding's third new token differs
    n = numbers(run)
    assert n.same is False and n.differs_at == 2
    md = how_it_works_md(run, n)
    assert words in md and absent not in md
    assert ("*Exactness* in docs/method.md" in md) == (dtype != "float32")


def test_the_running_line_says_more_steps_are_coming_until_the_run_is_computed():
    """While decoders can still compute, the total is unknown: the line says so in words (it once read "step 1 of
    …."); once all is computed it gives the total."""
    from types import SimpleNamespace

    from app.render.status import running_line

    run = make_run()
    running = running_line(SimpleNamespace(run=run, cursor=1, can_compute=True), "Running")
    done = running_line(SimpleNamespace(run=run, cursor=1, can_compute=False), "Replaying")
    assert "step 1, more to come." in running and "…" not in running and "<b>Gumiho</b>" in running
    assert "step 1 of 2." in done
