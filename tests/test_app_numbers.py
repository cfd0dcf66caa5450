"""The numbers of a run and the charts drawn from them (pure functions, no server)."""
import pytest
from app_data import make_run, prefill, record

from app.render.charts import accept_figure, depth_figure, speed_figure, speedup_figure
from app.render.explain import how_it_works_md, numbers_html
from app.render.stats import baseline_time, run_stats, running_speedup
from gumiho_core import StepRecord


def test_stats_match_the_engine_definitions():
    run = make_run()
    s = run_stats(run)
    assert s.tokens == 9 and s.steps == 2 and s.mean_accept_len == pytest.approx((9 - 1) / 2)
    assert s.depth_reached[:5] == (2, 2, 2, 1, 1) and s.depth_accepted[:5] == (2, 2, 1, 1, 0)
    assert s.seconds == pytest.approx(0.6) and s.tokens_per_s == pytest.approx(9 / 0.6)
    assert s.same_as_plain is True
    assert s.speedup == pytest.approx(baseline_time(run, 9) / 0.6) == pytest.approx(1.0 / 0.6)


def test_running_speedup_uses_plain_decodings_time_to_the_same_token_count():
    run = make_run()
    assert running_speedup(run, 2) == [(1, pytest.approx(1.0)), (4, pytest.approx(0.5 / 0.4)),
                                       (9, pytest.approx(1.0 / 0.6))]
    assert baseline_time(run, 10) is None


def test_stats_of_an_earlier_step_and_of_plain_decoding():
    assert run_stats(make_run(), upto=1).tokens == 4
    ar = make_run("ar", records=[prefill()] + [StepRecord(i, "autoregressive", None, (), None, (20,), 0, 0.1, 0,
                                                          i + 1, i, 0, False, None) for i in range(1, 4)],
                  baseline=[])
    s = run_stats(ar)
    assert s.speedup == 1.0 and s.mean_accept_len == 1.0 and s.base_tokens_per_s == pytest.approx(s.tokens_per_s)


def test_charts_have_the_run_and_its_baseline():
    run = make_run()
    assert [t.name for t in speed_figure(run, 2).data] == ["gumiho", "plain decoding"]
    assert list(speedup_figure(run, 2).data[0].y) == pytest.approx([1.0, 1.25, 1 / 0.6])
    bars = {t.name: list(t.y) for t in accept_figure(run, 2).data}
    assert bars["S1"] == [1, 1] and bars["M2"] == [0, 1] and bars["T"] == [1, 1]
    assert list(depth_figure(run, 2).data[0].y)[:5] == [1.0, 1.0, 0.5, 1.0, 0.0]
    assert "plain decoding drafts nothing" in str(depth_figure(make_run("ar", records=[prefill()]), 0).layout)


@pytest.mark.parametrize("records", [[prefill()], [prefill(), record(1, total=4)]])
def test_charts_of_a_short_run_have_their_own_axes_not_plotlys_defaults(records):
    run = make_run(records=records, baseline=[])
    depth = depth_figure(run, len(records) - 1).layout
    assert tuple(depth.xaxis.range) == (0.5, 7.5) and tuple(depth.yaxis.range) == (0, 1.35)
    assert tuple(depth.xaxis.tickvals) == tuple(range(1, 8))
    speedup = speedup_figure(run, len(records) - 1).layout
    assert speedup.xaxis.range[0] == 0 and speedup.xaxis.range[1] > 0


def test_numbers_and_how_it_works_use_the_runs_values():
    run = make_run()
    s = run_stats(run)
    assert "1.67×" in numbers_html(s) and "4.00" in numbers_html(s)
    assert numbers_html(None).count("–") == 4
    md = how_it_works_md(run, s)
    assert "**4.00 tokens per pass**" in md and "1.67×" in md and "identical" in md
    assert "Speculative decoding" in how_it_works_md(None, None)


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
    s = run_stats(run)
    assert s.same_as_plain is False and s.differs_at == 2
    md = how_it_works_md(run, s)
    assert words in md and absent not in md
    assert ("*Exactness* in the README" in md) == (dtype != "float32")


def test_the_running_line_says_more_steps_are_coming_until_the_run_is_computed():
    """While decoders can still compute, the total is unknown: the line says so in words (it once read "step 1 of
    …."); once all is computed it gives the total."""
    from types import SimpleNamespace

    from app.render.status import running_line

    run = make_run()
    running = running_line(SimpleNamespace(run=run, cursor=1, can_compute=True), "Running")
    done = running_line(SimpleNamespace(run=run, cursor=1, can_compute=False), "Replaying")
    assert "step 1, more to come." in running and "…" not in running
    assert "step 1 of 2." in done
