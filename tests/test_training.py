"""The data pipeline and the training objective on tiny random targets."""
import json
import signal
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from gumiho_core import DecodeConfig, GumihoError, TreeConfig, generate, start
from gumiho_core import models as model_loading
from gumiho_core.acceptance import Acceptance
from gumiho_core.training.checkpoint import stop_on_signals
from gumiho_core.training.cli import Models
from gumiho_core.training.data import extract_features, load_features, read_jsonl, split
from gumiho_core.training.sampler import BatchSampler, Request
from gumiho_core.training.objective import LossWeights, collate, gumiho_loss
from gumiho_core.training.run_commands import train_precision
from gumiho_core.training.trainer import TrainConfig, Trainer, new_drafter
from gumiho_core.timing import device_name
from tiny import tiny_target


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=11, vocab=61, hidden=48, heads=4, kv_heads=2, scale=4.0, max_len=512)


@pytest.fixture(scope="module")
def rows(target):
    """Conversations: random token prompts answered greedily and by sampling by the target itself."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 61, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist()
               for _ in range(48)]
    sampler = BatchSampler(target, rows=16, max_new_tokens=48, max_prompt=8, generator=torch.Generator().manual_seed(1),
                           record_features=False)
    reqs = [Request((t, i), tuple(p), t) for t in (0.0, 0.8) for i, p in enumerate(prompts)]
    answers = {a.key: list(a.answer_ids) for a in sampler.run(reqs)}
    return [{"prompt_ids": p, "answer_ids": answers[(t, i)]} for t in (0.0, 0.8) for i, p in enumerate(prompts)]


@pytest.fixture(scope="module")
def features(target, rows, tmp_path_factory):
    folder = extract_features(target, rows, tmp_path_factory.mktemp("feats"), shard_size=40)
    return load_features(folder, target.config.hidden_size)


def test_features_round_trip(target, rows, features):
    assert len(features) == len(rows)
    s, row = features[5], rows[5]
    assert s.ids.tolist() == row["prompt_ids"] + row["answer_ids"]
    assert s.mask.tolist() == [False] * len(row["prompt_ids"]) + [True] * len(row["answer_ids"])
    with torch.inference_mode():
        ref = target.model(input_ids=s.ids[None], output_hidden_states=True).hidden_states[-1][0]
    torch.testing.assert_close(s.hidden.float(), ref, atol=2e-3, rtol=2e-3)  # stored in fp16


def test_loss_offsets_against_an_explicit_loop(target, features):
    drafter = new_drafter(target, None, TrainConfig())
    with torch.no_grad():
        for p in drafter.mlp.parameters():
            p.normal_(0, 0.05)
    seq = features[3]
    batch = collate([seq])
    with torch.no_grad():
        _, metrics = gumiho_loss(drafter, batch, LossWeights())
        h, ids, T = seq.hidden.float(), seq.ids, seq.ids.shape[0]
        o = drafter.serial(drafter.fuse(ids[1:][None], h[:-1][None]), torch.arange(T - 1)[None], None)[0]
        for m in (0, 2):
            losses = []
            for j in range(T):
                if j + 3 + m >= T or not seq.mask[j + 1]:
                    continue
                u1 = drafter.fuse(ids[j + 2][None], o[j][None])[0]
                u2 = drafter.fuse(ids[j + 3][None], o[j + 1][None])[0]
                pred = drafter.heads(torch.cat([u1, u2])[None])[m, 0]
                losses.append(F.smooth_l1_loss(pred, h[j + 3 + m]))
            assert metrics.floats()[f"mlp{m + 1}_l1"] == pytest.approx(float(torch.stack(losses).mean()), rel=1e-4)


def mean_accept(target, drafter, prompts, method="gumiho"):
    acc = Acceptance()
    for p in prompts:
        acc.add(generate(start(method, target, p, DecodeConfig(max_new_tokens=32),
                               TreeConfig(top_k=4, mlp_topk=4, pruning=6, total_tokens=16), drafter)))
    return acc.mean_accept_len


def test_training_lowers_loss_and_raises_acceptance(target, features, tmp_path):
    cfg = TrainConfig(epochs=15, lr=3e-3, warmup_steps=5, tokens_per_step=512, micro_tokens=512, draft_vocab=0,
                      holdout=0.1, objective="paper", precision="fp32", rollout="teacher-forced")
    trainer = Trainer(target, features, cfg, tmp_path / "run")
    prompts = [[7, 3, 9], [1, 2, 3, 4], [50, 40, 30], [12, 12, 5, 8, 9]]
    before_val = trainer.validate()
    before = mean_accept(target, trainer.drafter.eval(), prompts)
    drafter = trainer.run()
    after = mean_accept(target, drafter, prompts)
    last = trainer.history[-1]
    assert last["val_loss"] < 0.8 * before_val["val_loss"], (before_val["val_loss"], last["val_loss"])
    assert last["val_serial_top1"] > before_val["val_serial_top1"] + 0.25
    assert last["val_mlp1_top1"] > 0.2
    assert after > before + 0.4, (before, after)
    assert (tmp_path / "run" / "drafter" / "model.safetensors").is_file()


def test_resume_with_other_settings_is_refused(target, features, tmp_path):
    cfg = TrainConfig(epochs=1, tokens_per_step=2048, micro_tokens=2048, draft_vocab=0, precision="fp32")
    Trainer(target, features, cfg, tmp_path / "run").run()
    # same settings, more epochs: resumes where it stopped
    more = Trainer(target, features, TrainConfig(**{**cfg.__dict__, "epochs": 2}), tmp_path / "run")
    assert more.epoch == 1
    with pytest.raises(GumihoError, match="lr was 0.0015, now 0.001"):
        Trainer(target, features, TrainConfig(**{**cfg.__dict__, "lr": 1e-3}), tmp_path / "run")


def test_draft_vocabulary_keeps_frequent_and_end_tokens(target, features, tmp_path):
    from gumiho_core.training.trainer import choose_draft_vocab

    with_eos = tiny_target(seed=11, vocab=61, hidden=48, heads=4, kv_heads=2, eos=60)
    vocab = choose_draft_vocab(features, 20, with_eos)
    assert vocab.numel() == 20 and vocab.tolist() == sorted(vocab.tolist())
    counts = torch.bincount(torch.cat([s.ids for s in features]), minlength=61)
    assert 60 in vocab.tolist(), "end tokens are always draftable"
    assert set(counts.argsort(descending=True)[:10].tolist()) <= set(vocab.tolist()) | {60}
    cfg = TrainConfig(epochs=1, tokens_per_step=2048, micro_tokens=2048, draft_vocab=20, precision="fp32")
    drafter = Trainer(target, features, cfg, tmp_path / "run").run()
    assert drafter.shared.lm_head.shape[0] == 20
    subset = set(drafter.shared.vocab_map.tolist())
    tree = TreeConfig(top_k=4, mlp_topk=4)
    run = generate(start("gumiho", target, [1, 2, 3], DecodeConfig(max_new_tokens=20), tree, drafter))
    for rec in run.records[1:]:
        assert set(rec.tree.tokens[1:]) <= subset  # drafts come from the subset, as target ids


def test_bad_data_files(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(GumihoError, match="is empty"):
        read_jsonl(tmp_path / "empty.jsonl")
    (tmp_path / "bad.jsonl").write_text(json.dumps({"prompt": "a"}) + "\n{not json\n")
    with pytest.raises(GumihoError, match="bad.jsonl:2: not valid JSON"):
        read_jsonl(tmp_path / "bad.jsonl")
    with pytest.raises(GumihoError, match="expected an object with keys \\['prompt'\\]"):
        (tmp_path / "keys.jsonl").write_text(json.dumps({"text": "a"}) + "\n")
        read_jsonl(tmp_path / "keys.jsonl", required=("prompt",))
    with pytest.raises(GumihoError, match="no extracted features"):
        load_features(tmp_path)


def test_feature_extraction_resumes_when_rows_are_added(target, rows, tmp_path):
    extract_features(target, rows[:5], tmp_path, shard_size=4)  # shards of 4 and 1 rows
    first = (tmp_path / "shard_0000.safetensors").stat().st_mtime_ns
    extract_features(target, rows[:10], tmp_path, shard_size=4)  # 4 + 4 + 2: shard 1 is redone, shard 0 kept
    assert (tmp_path / "shard_0000.safetensors").stat().st_mtime_ns == first
    seqs = load_features(tmp_path)
    assert [s.ids.tolist() for s in seqs] == [r["prompt_ids"] + r["answer_ids"] for r in rows[:10]]


def test_split_holds_out_every_answer_of_a_prompt_together(features):
    from dataclasses import replace

    seqs = [replace(s, group=f"p{i % 48}") for i, s in enumerate(features)]  # two answers per prompt
    train, val = split(seqs, 0.25, seed=0)
    assert len(features) == 96 and len(train) + len(val) == 96 and 6 <= len(val) // 2 <= 20
    assert not {s.group for s in train} & {s.group for s in val}
    assert all(sum(s.group == g for s in val) == 2 for g in {s.group for s in val})
    # answers to new prompts added later never move an old prompt from one side to the other
    more = seqs + [replace(s, group=f"new{i}") for i, s in enumerate(features)]
    train2, val2 = split(more, 0.25, seed=0)
    assert {s.group for s in val2 if not s.group.startswith("new")} == {s.group for s in val}
    assert split(seqs, 0.25, seed=1)[1] != val  # the seed picks another held-out set


def test_every_share_of_a_data_curve_is_held_out_on_the_same_conversations(target, features, tmp_path):
    """The share (--data-fraction, scaling) is taken from the training side after the split: before, a quarter
    of the prompts was held out on a quarter of the held-out set, so the shares' held-out losses differed in
    what they measured as well as in the data they trained on."""
    from dataclasses import replace

    from gumiho_core.training.corpus import prompt_key

    seqs = [replace(s, group=prompt_key(f"prompt {i % 48}")) for i, s in enumerate(features)]
    cfg = TrainConfig(epochs=1, tokens_per_step=512, micro_tokens=512, draft_vocab=0, holdout=0.25)
    runs = {f: Trainer(target, seqs, cfg, tmp_path / str(f), share=f) for f in (0.25, 0.5, 1.0)}
    held = [[s.group for s in r.val_seqs] for r in runs.values()]
    assert held[0] == held[1] == held[2] and held[0]
    kept = [{s.group for s in r.train_seqs} for r in runs.values()]
    assert kept[0] < kept[1] < kept[2] and not kept[2] & set(held[0])  # nested, and never the held-out ones
    with pytest.raises(GumihoError, match="no prompt keys"):
        Trainer(target, features, cfg, tmp_path / "own", share=0.5)


def test_learning_rate_decays_to_zero_by_the_last_step(target, features, tmp_path):
    from gumiho_core.training.trainer import lr_at

    # micro-batches as large as a step: padding leaves fewer real tokens, so most steps take two of them
    cfg = TrainConfig(epochs=2, tokens_per_step=512, micro_tokens=512, warmup_steps=2, draft_vocab=0,
                      precision="fp32")
    trainer = Trainer(target, features, cfg, tmp_path / "run")
    rates = []
    step = trainer._optimizer_step
    trainer._optimizer_step = lambda: (rates.append(lr_at(trainer.step, trainer.total_steps, cfg)), step())
    trainer.run()
    assert trainer.step == trainer.total_steps == len(rates)
    assert rates[-1] <= 2 * cfg.lr / len(rates) and max(rates) == pytest.approx(cfg.lr)  # the last of a linear ramp


def test_evaluation_subset_spreads_over_the_categories():
    """--eval-n takes prompts evenly spread over the (category-sorted) file, not its first categories."""
    from gumiho_core.training.run_commands import spread

    rows = [{"category": c, "prompt": f"{c} {i}"} for c in "abcdefgh" for i in range(10)]
    picked = spread(rows, 16)
    assert len(picked) == 16 and len({r["prompt"] for r in picked}) == 16
    assert {r["category"] for r in picked} == set("abcdefgh")
    assert spread(rows, 0) == rows and spread(rows, 500) == rows


def _all_state(trainer):
    """Weights and optimizer moments, by name."""
    opt = trainer.opt.state_dict()["state"]
    return {**{f"w.{k}": v for k, v in trainer.drafter.state_dict().items()},
            **{f"opt.{i}.{k}": v for i, s in opt.items() for k, v in s.items()}}


@pytest.mark.parametrize("architecture,head", [("eagle", "serial7"), ("medusa", "mlp7")])
def test_every_member_of_the_family_learns_as_drafted(target, features, tmp_path, architecture, head):
    """EAGLE style (1 layer, 7 serial steps as drafted) and Medusa style (7 one-block heads on the target's feature)
    train on the same loop and objective as Gumiho. EAGLE style decodes better for it; Medusa's zero-initialised heads
    start as the identity, which on this repetitive tiny target already guesses well, so its loss must fall."""
    cfg = TrainConfig(architecture=architecture, epochs=15, lr=1e-2, warmup_steps=5, tokens_per_step=512,
                      micro_tokens=512, draft_vocab=0, holdout=0.1, precision="fp32", rollout="as-drafted")
    trainer = Trainer(target, features, cfg, tmp_path / "run")
    prompts = [[7, 3, 9], [1, 2, 3, 4], [50, 40, 30], [12, 12, 5, 8, 9]]
    before_val = trainer.validate()
    before = mean_accept(target, trainer.drafter.eval(), prompts, architecture)
    drafter = trainer.run()
    last = trainer.history[-1]
    assert f"val_{head}_top1" in last, sorted(last)  # every depth is trained: 7 steps, or 7 heads
    assert last["val_loss"] < 0.98 * before_val["val_loss"], (before_val["val_loss"], last["val_loss"])
    if architecture == "eagle":
        assert last["val_serial_top1"] > before_val["val_serial_top1"] + 0.25
        assert mean_accept(target, drafter, prompts, architecture) > before + 0.4


@pytest.mark.parametrize("rollout", ["teacher-forced", "as-drafted"])
def test_a_run_resumed_mid_epoch_equals_an_uninterrupted_one(target, features, tmp_path, rollout):
    """N steps straight vs N/2, a new Trainer on the same folder (as after a crash), and the rest: same weights,
    optimizer, schedule, data order and noise. Steps fixed in advance: the epoch holds more steps than the run."""
    cfg = TrainConfig(steps=8, tokens_per_step=384, micro_tokens=256, warmup_steps=2, draft_vocab=0, holdout=0.1,
                      precision="fp32", rollout=rollout, ce_fraction=0.5, checkpoint_minutes=60)
    straight = Trainer(target, features, cfg, tmp_path / "straight")
    assert straight.total_steps == 8 < straight.steps_per_epoch, "the run ends inside its first epoch"
    straight.run()
    first = Trainer(target, features, cfg, tmp_path / "resumed")
    first.run(until=4)
    assert first.step == 4 and not first.history, "stopped mid-epoch, before any epoch ended"
    second = Trainer(target, features, cfg, tmp_path / "resumed")
    assert (second.step, second.progress.micro) == (4, first.progress.micro) and second.progress.micro > 0
    second.run()
    assert second.step == straight.step == 8
    a, b = _all_state(straight), _all_state(second)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert second.history[-1]["val_loss"] == straight.history[-1]["val_loss"]
    assert second.history[-1]["train_loss"] == pytest.approx(straight.history[-1]["train_loss"], rel=1e-12)


def test_a_signal_stops_a_run_after_its_step_with_a_checkpoint_there(target, features, tmp_path):
    """SIGTERM (what `timeout` sends when a device call's time is up) during step 3 stops the run after that step
    with a checkpoint there, not at the last periodic one: the resumed run loses nothing and equals an
    uninterrupted one. Outside the block the process's own handler is back."""
    cfg = TrainConfig(steps=6, tokens_per_step=384, micro_tokens=256, warmup_steps=2, draft_vocab=0, holdout=0.0,
                      precision="fp32", checkpoint_minutes=60)
    straight = Trainer(target, features, cfg, tmp_path / "straight")
    straight.run()
    unhandled = []  # a SIGTERM that reached this handler would have ended a real run without its checkpoint
    before = signal.signal(signal.SIGTERM, lambda signum, frame: unhandled.append(signum))
    try:
        first = Trainer(target, features, cfg, tmp_path / "stopped")
        step = first._optimizer_step

        def step_then_signal():
            step()
            if first.step == 3:
                signal.raise_signal(signal.SIGTERM)
        first._optimizer_step = step_then_signal
        with stop_on_signals() as stop:
            first.run(stop=stop)
        assert stop.is_set() and stop.signum == signal.SIGTERM and not unhandled
        assert first.step == 3 and not first.history, "stopped after the step it was in, mid-epoch"
        signal.raise_signal(signal.SIGTERM)
        assert unhandled == [signal.SIGTERM], "the handler from before the block is back"
    finally:
        signal.signal(signal.SIGTERM, before)
    second = Trainer(target, features, cfg, tmp_path / "stopped")
    assert second.step == 3, "the checkpoint holds every step trained"
    second.run()
    a, b = _all_state(straight), _all_state(second)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_checkpoints_come_inside_an_epoch_and_keep_the_asked_steps(target, features, tmp_path):
    cfg = TrainConfig(steps=6, tokens_per_step=384, micro_tokens=256, warmup_steps=2, draft_vocab=0, holdout=0.0,
                      precision="fp32", checkpoint_steps=2, keep_steps=(3, 6))
    trainer = Trainer(target, features, cfg, tmp_path / "run")
    saved = []
    save = trainer._save
    trainer._save = lambda: (saved.append(trainer.step), save())
    trainer.run()
    assert saved == [2, 4, 6]  # every 2 steps, and at the schedule's end (mid-epoch: the epoch is longer)
    for step in (3, 6):
        meta = json.loads((tmp_path / "run" / f"drafter-step{step}" / "config.json").read_text())
        assert meta["steps"] == step and meta["device"] == device_name(target.device)  # the card's "trained on"
    with pytest.raises(GumihoError, match="steps was 6, now 7"):
        Trainer(target, features, TrainConfig(**{**cfg.__dict__, "steps": 7}), tmp_path / "run")
    with pytest.raises(GumihoError, match="trained on 96 conversations"):
        Trainer(target, features[:50], cfg, tmp_path / "run")


def test_bad_schedule_settings_are_named():
    from gumiho_core.training.run_commands import steps_list

    assert steps_list("700, 1400,2800") == (700, 1400, 2800) and steps_list("") == ()
    with pytest.raises(GumihoError, match="got '7e2'"):
        steps_list("700,7e2")
    with pytest.raises(GumihoError, match="steps must be >= 0; got -5"):
        TrainConfig(steps=-5)
    with pytest.raises(GumihoError, match="rollout must be one of teacher-forced, as-drafted; got 'drafted'"):
        TrainConfig(rollout="drafted")


def test_soft_cross_entropy_equals_the_log_softmax_formula_and_its_gradient():
    """The chunked soft cross-entropy (lse(z) - p.z, gradient softmax(z) - p) against -(p * log_softmax(z)).sum(),
    over more rows than one chunk holds, rows sharing target distributions; and gradcheck on a small case."""
    from gumiho_core.training.objective import CE_ROWS, SoftCrossEntropy
    torch.manual_seed(0)
    N, M, V = 2 * CE_ROWS + 5, 9, 40
    z = (3 * torch.randn(N, V, dtype=torch.float64)).requires_grad_()
    target = torch.softmax(2 * torch.randn(M, V, dtype=torch.float64), -1)
    rows = torch.randint(0, M, (N,))
    weights = torch.rand(N, dtype=torch.float64)
    got = SoftCrossEntropy.apply(z, target, rows)
    (dz,) = torch.autograd.grad((got * weights).sum(), z)
    want = -(target[rows] * torch.log_softmax(z, -1)).sum(-1)
    (want_dz,) = torch.autograd.grad((want * weights).sum(), z)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(dz, want_dz)
    small = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: SoftCrossEntropy.apply(x, target[:3, :7].softmax(-1), rows[:5] % 3),
                                    (small,))
    half = SoftCrossEntropy.apply(z.detach().bfloat16(), target.float(), rows)  # bf16 logits: summed in fp32
    assert half.dtype == torch.float32
    torch.testing.assert_close(half.double(), want.detach(), rtol=2e-2, atol=2e-2)
    temp = 2 * z  # logits the loss alone reads, as in training: their gradient may be written over them
    before = temp.detach().clone()
    over = SoftCrossEntropy.apply(temp, target, rows, CE_ROWS, True)
    (dz_over,) = torch.autograd.grad((over * weights).sum(), z)
    (dz_new,) = torch.autograd.grad((SoftCrossEntropy.apply(2 * z, target, rows) * weights).sum(), z)
    torch.testing.assert_close(over.detach(), SoftCrossEntropy.apply(before, target, rows))
    torch.testing.assert_close(dz_over, dz_new)
    assert not torch.equal(temp.detach(), before), "the gradient went into the logits' own buffer"


def test_a_gpu_takes_the_soft_cross_entropy_whole():
    """On a GPU each chunk of the soft cross-entropy is a dozen kernel launches, so there the rows go in one chunk
    (up to a memory bound) and the ops dispatched do not grow with the rows; the values equal the CPU's chunks'."""
    from step_overhead import Tally, _Ops  # scripts/step_overhead.py's op counter
    from gumiho_core.training.objective import CE_ROWS, GPU_CE_ELEMENTS, SoftCrossEntropy, ce_chunk_rows

    def run(N, chunk):
        torch.manual_seed(N)
        z = torch.randn(N, 32, dtype=torch.float64, requires_grad=True)
        target, rows = torch.softmax(torch.randn(6, 32, dtype=torch.float64), -1), torch.randint(0, 6, (N,))
        tally = Tally(on=True)
        with _Ops(tally):
            nll = SoftCrossEntropy.apply(z, target, rows, chunk)
            (dz,) = torch.autograd.grad(nll.sum(), z)
        return nll, dz, sum(tally.ops.values())

    assert ce_chunk_rows(torch.device("cpu"), 8192) == CE_ROWS
    assert ce_chunk_rows(torch.device("cuda"), 8192) == GPU_CE_ELEMENTS // 8192 > 100 * CE_ROWS
    assert ce_chunk_rows(torch.device("cuda"), 49152 * 10 ** 4) == CE_ROWS  # never fewer rows than a CPU's
    N = 5 * CE_ROWS + 3
    (cpu_nll, cpu_dz, cpu_ops), (gpu_nll, gpu_dz, gpu_ops) = run(N, CE_ROWS), run(N, N)
    torch.testing.assert_close(gpu_nll, cpu_nll)
    torch.testing.assert_close(gpu_dz, cpu_dz)
    assert gpu_ops == run(10 * N, 10 * N)[2] < cpu_ops / 3, (gpu_ops, cpu_ops)
    assert run(10 * N, CE_ROWS)[2] > 5 * cpu_ops  # the control: chunked, the ops grow with the rows


def test_a_gpu_takes_one_micro_batch_a_step(target, features, tmp_path, monkeypatch):
    """On a GPU each op of a micro-batch is a kernel launch whatever its size, so there a step is one micro-batch of
    twice tokens_per_step padded tokens (train --micro-tokens 0): it holds about the tokens that two micro-batches of
    tokens_per_step hold (a step's size is the recipe), and its forward and backward dispatch about half the ops (the
    optimizer's do not depend on the micro-batches; on a GPU AdamW runs a few dozen multi-tensor ops)."""
    import random

    from step_overhead import Tally, _Ops  # scripts/step_overhead.py's op counter
    from gumiho_core.training import objective
    from gumiho_core.training.schedule import CPU_MICRO_TOKENS, micro_batches, micro_tokens_for, step_ends

    monkeypatch.setattr(objective, "ce_chunk_rows", lambda device, vocab: 10 ** 9)  # the soft CE whole, as on a GPU
    tokens_per_step = 384
    gpu = micro_tokens_for(torch.device("cuda"), tokens_per_step)
    assert micro_tokens_for(torch.device("cpu"), tokens_per_step) == CPU_MICRO_TOKENS and gpu == 2 * tokens_per_step

    def steps(micro: int) -> tuple[list[int], list[int], int]:
        """(micro-batches per step, tokens per step) over an epoch, and the ops of its first step's micro-batches."""
        cfg = TrainConfig(steps=4, tokens_per_step=tokens_per_step, micro_tokens=micro, warmup_steps=1, draft_vocab=0,
                          holdout=0.0, precision="fp32", rollout="as-drafted")
        trainer = Trainer(target, features, cfg, tmp_path / str(micro))
        batches = micro_batches(trainer.train_seqs, micro, random.Random(0))
        ends = step_ends(batches, tokens_per_step)
        starts = [0] + [e + 1 for e in ends[:-1]]
        tally = Tally(on=True)
        with _Ops(tally):
            for m in batches[: ends[0] + 1]:
                trainer._micro_step(m, trainer._weights())
        tokens = [sum(len(s.ids) for m in batches[a:e + 1] for s in m) for a, e in zip(starts, ends)]
        return [e + 1 - a for a, e in zip(starts, ends)], tokens[:-1], sum(tally.ops.values())  # the last: a rest

    (cpu_micros, cpu_tokens, cpu_ops), (gpu_micros, gpu_tokens, gpu_ops) = steps(tokens_per_step), steps(gpu)
    assert set(gpu_micros) == {1} and sum(cpu_micros) / len(cpu_micros) > 1.8, (cpu_micros, gpu_micros)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean(gpu_tokens) == pytest.approx(mean(cpu_tokens), rel=0.1), (cpu_tokens, gpu_tokens)
    assert gpu_ops < 0.55 * cpu_ops, (gpu_ops, cpu_ops)


def test_a_run_can_start_from_trained_heads(target, features, tmp_path):
    """--init-from: the new run's weights at step 0 are the saved heads' (their draft vocabulary too); it trains on
    with its own schedule, resumes like any run, and a bad or untrained source is named."""
    from safetensors.torch import load_file

    from gumiho_core.drafter_files import trained_steps

    base = TrainConfig(steps=6, tokens_per_step=384, micro_tokens=256, warmup_steps=2, draft_vocab=20, holdout=0.1,
                       precision="fp32")
    Trainer(target, features, base, tmp_path / "first").run()
    heads = tmp_path / "first" / "drafter"
    cfg = TrainConfig(**{**base.__dict__, "draft_vocab": 0, "init_from": str(heads)})
    warm = Trainer(target, features, cfg, tmp_path / "warm")
    saved = load_file(str(heads / "model.safetensors"))
    assert warm.step == 0 and torch.equal(warm.drafter.shared.vocab_map, saved["draft_vocab"])
    own = {k: v for k, v in warm.drafter.state_dict().items() if not k.startswith("rotary.")}
    assert own.keys() == set(saved) - {"draft_vocab"}
    for k, v in own.items():
        assert v.dtype == torch.float32 and torch.equal(v, saved[k].float()), k
    fresh = Trainer(target, features, TrainConfig(**{**base.__dict__, "seed": 0}), tmp_path / "fresh")
    assert warm.validate()["val_loss"] < fresh.validate()["val_loss"]
    warm.run(until=3)
    again = Trainer(target, features, cfg, tmp_path / "warm")
    assert again.step == 3
    again.run()
    assert again.step == 6
    # how long the heads trained since random weights: the first run's 6 steps, then 6 more (across the resume)
    assert [trained_steps(str(p / "drafter")) for p in (tmp_path / "first", tmp_path / "warm")] == [6, 12]
    with pytest.raises(GumihoError, match="does not exist"):
        Trainer(target, features, TrainConfig(**{**cfg.__dict__, "init_from": str(tmp_path / "nowhere")}),
                tmp_path / "bad")
    with pytest.raises(GumihoError, match="not trained ones"):
        Trainer(target, features, TrainConfig(**{**cfg.__dict__, "init_from": "untrained"}), tmp_path / "bad2")


def test_ship_can_take_the_heads_kept_where_the_step_curve_peaked(target, features, tmp_path):
    """ship --ship-step N copies the heads kept after N steps, and its card says N steps and reports their own
    evaluation; another run's evaluation, or a step that kept nothing, is refused by name."""
    import argparse
    import json

    from safetensors.torch import load_file
    from gumiho_core.training.run_commands import cmd_ship

    cfg = TrainConfig(steps=6, tokens_per_step=384, micro_tokens=256, warmup_steps=2, draft_vocab=20, holdout=0.1,
                      precision="fp32", keep_steps=(2,))
    run = tmp_path / "train" / "r"
    Trainer(target, features, cfg, run).run()
    (tmp_path / "corpus").mkdir()
    args = argparse.Namespace(workdir=str(tmp_path / "train"), target="tiny", run="r", ship_to=str(tmp_path / "dest"),
                              ship_step=2, recipe="a recipe", corpus=str(tmp_path / "corpus"))
    models = argparse.Namespace(target=lambda: target)
    report = {"prompts": 2, "max_new_tokens": 8, **{m: {"mean_accept_len": 1.5, "per_depth": [0.5] + [0.0] * 6}
                                                    for m in ("gumiho", "serial")}}
    (run / "evaluation.json").write_text(json.dumps({**report, "draft": str(run / "drafter")}))
    with pytest.raises(GumihoError, match="not an evaluation of"):
        cmd_ship(args, models)  # the card would report the last heads' figures for the kept ones
    (run / "evaluation.json").write_text(json.dumps({**report, "draft": str(run / "drafter-step2")}))
    cmd_ship(args, models)
    shipped, kept = (load_file(str(d / "model.safetensors")) for d in (tmp_path / "dest", run / "drafter-step2"))
    last = load_file(str(run / "drafter" / "model.safetensors"))
    assert all(torch.equal(shipped[k], kept[k]) for k in kept) and not all(torch.equal(last[k], kept[k]) for k in kept)
    card = (tmp_path / "dest" / "README.md").read_text()
    assert "2 optimizer steps (kept after step 2 of the run's 6" in card and "| gumiho | 1.50 |" in card
    with pytest.raises(GumihoError, match="no heads kept after that step .*kept with weights: 2"):
        cmd_ship(argparse.Namespace(**{**vars(args), "ship_step": 4}), models)


def test_step_curve_reevaluates_the_latest_heads_once_training_has_rewritten_them(target, features, tmp_path,
                                                                                monkeypatch):
    """<run>/drafter is rewritten at every checkpoint: a report evaluated at an earlier step is not reused for the
    later heads (it was, when only its prompts and length were compared), and the kept heads' reports are."""
    import argparse
    import json
    from pathlib import Path

    from gumiho_core.drafter import save_drafter
    from gumiho_core.models import load_drafter
    from gumiho_core.training import run_commands

    run = tmp_path / "train" / "r"
    cfg = TrainConfig(steps=2, tokens_per_step=384, micro_tokens=256, warmup_steps=1, draft_vocab=0, holdout=0.0,
                      precision="fp32", keep_steps=(1,))
    Trainer(target, features, cfg, run).run()
    evaluated = []

    def fake(tgt, folder, prompts, tokens):
        step = json.loads((Path(folder) / "config.json").read_text())["steps"]
        evaluated.append(step)
        return {"prompts": len(prompts), "max_new_tokens": tokens,
                "gumiho": {"mean_accept_len": 1 + step / 10, "per_depth": [0.1] * 7}}

    monkeypatch.setattr(run_commands, "evaluate_draft", fake)
    monkeypatch.setattr(run_commands, "evaluation_prompts", lambda args: [[1, 2, 3]] * 2)
    args = argparse.Namespace(workdir=str(tmp_path / "train"), target="tiny", run="r", eval_tokens=8)
    models = argparse.Namespace(target=lambda: target)
    run_commands.cmd_steps(args, models)
    assert evaluated == [1, 2]
    # training goes on to step 4: the latest heads are rewritten, the report of step 2 left beside them
    Trainer(target, features, TrainConfig(**{**cfg.__dict__, "steps": 4}), tmp_path / "r4").run()
    for name in ("model.safetensors", "config.json"):
        (run / "drafter" / name).write_bytes((tmp_path / "r4" / "drafter" / name).read_bytes())
    run_commands.cmd_steps(args, models)
    assert evaluated == [1, 2, 4]  # step 1's report reused, step 2's not taken for step 4
    points = json.loads((run / "steps.json").read_text())
    assert [(p["step"], p["gumiho"]["mean_accept_len"]) for p in points] == [(1, 1.1), (4, 1.4)]
    assert (run / "drafter" / "evaluation.json").exists()
    save_drafter(load_drafter(str(run / "drafter"), target), run / "drafter")
    assert not (run / "drafter" / "evaluation.json").exists()  # the trainer's save drops the old heads' report


@pytest.mark.parametrize("vendor, flags, expected", [
    ("AuthenticAMD", {"avx2", "fma"}, "fp32"), ("GenuineIntel", {"avx512f", "avx512_bf16"}, "fp32"),
    ("AuthenticAMD", {"avx512f", "avx512_bf16"}, "bf16"),
    ("GenuineIntel", {"avx512_bf16", "amx_bf16", "amx_tile"}, "bf16")])
def test_auto_precision_is_bf16_only_where_it_is_faster(monkeypatch, vendor, flags, expected):
    """AVX512-BF16 without AMX trains and makes data faster in fp32 on an Intel Xeon, in bf16 on an AMD EPYC
    (docs/training.md, "Precision and memory")."""
    monkeypatch.setattr(model_loading, "_cpu_flags", lambda: flags)
    monkeypatch.setattr(model_loading, "_cpu_vendor", lambda: vendor)
    args = SimpleNamespace(precision="auto", data_dtype="auto", device="cpu", dtype="auto")
    assert train_precision(args) == expected
    loader = Models(args)
    monkeypatch.setattr(loader, "target", lambda dtype=None: dtype)
    assert loader.data_target() == {"fp32": "float32", "bf16": "bfloat16"}[expected]
    assert train_precision(SimpleNamespace(precision="bf16", device="cpu")) == "bf16"  # a named choice is kept


def test_the_family_is_tuned_alike_on_the_validation_split_and_trained_alike(target, features, tmp_path, monkeypatch):
    """tune: every member tries every rate for the same steps; each keeps the rate with the longest validation length
    (a finished trial is read back, not trained again). family: every member trains with the same schedule and its
    chosen rate, as run <run>-<member>."""
    import json

    from gumiho_core.training import family, run_commands
    from gumiho_core.training.cli import build_parser

    trained = []
    monkeypatch.setattr(run_commands, "training_sequences", lambda args, tgt: trained.append(args.run) or features)
    args = build_parser().parse_args(["tune", "--workdir", str(tmp_path), "--steps", "4", "--tokens-per-step", "384",
                                      "--micro-tokens", "256", "--draft-vocab", "0", "--precision", "fp32",
                                      "--architectures", "eagle,medusa", "--lrs", "1e-5,1e-2", "--run", "cmp"])
    models = SimpleNamespace(target=lambda: target)
    family.cmd_tune(args, models)
    sweep = json.loads((tmp_path / "tune.json").read_text())
    for arch in ("eagle", "medusa"):
        trials = sweep[arch]["trials"]
        assert [t["lr"] for t in trials] == [1e-5, 1e-2] and all(t["steps"] == 4 for t in trials)
        assert sweep[arch]["lr"] == max(trials, key=lambda t: t["validation_length"])["lr"]
        assert len(trials[0]["val_top1"]) == 7  # every depth counts, whoever drafts it
    assert len(trained) == 4
    family.cmd_tune(args, models)
    assert len(trained) == 4, "finished trials are read back"
    family.cmd_family(args, models)
    for arch in ("eagle", "medusa"):
        cfg = json.loads((tmp_path / f"cmp-{arch}" / "drafter" / "config.json").read_text())
        assert cfg["steps"] == 4 and cfg["train_config"]["lr"] == sweep[arch]["lr"]
        assert cfg["train_config"]["architecture"] == arch and cfg["config"]["heads_read"] == \
            ("target" if arch == "medusa" else "serial")
    with pytest.raises(GumihoError, match="--architectures"):
        family.cmd_family(build_parser().parse_args(["family", "--steps", "2", "--architectures", "hydra"]), models)


def test_family_refuses_a_sweep_that_has_not_reached_a_member(target, tmp_path):
    import json

    from gumiho_core.training import family
    from gumiho_core.training.cli import build_parser

    (tmp_path / "tune.json").write_text(json.dumps({"medusa": {"trials": [], "lr": 0.002}}))
    args = build_parser().parse_args(["family", "--workdir", str(tmp_path), "--steps", "2", "--architectures", "eagle"])
    with pytest.raises(GumihoError, match="holds no rate for eagle"):
        family.cmd_family(args, SimpleNamespace(target=lambda: target))
    assert family.chosen_rate(args, "medusa") == 0.002


def test_family_refuses_a_batch_other_than_the_sweeps(target, tmp_path):
    """A rate chosen at one batch size is not the best at another: family takes the sweep's tokens per step."""
    import json

    from gumiho_core.training import family
    from gumiho_core.training.cli import build_parser

    trials = [{"lr": 0.002, "steps": 80, "tokens_per_step": 2048, "validation_length": 0.2}]
    (tmp_path / "tune.json").write_text(json.dumps({"medusa": {"trials": trials, "lr": 0.002}}))
    parse = build_parser().parse_args
    args = parse(["family", "--workdir", str(tmp_path), "--steps", "2", "--architectures", "medusa",
                  "--tokens-per-step", "4096"])
    with pytest.raises(GumihoError, match="at 2048 tokens per step, and this run takes 4096: leave --tokens-per-step "
                                          "out"):
        family.cmd_family(args, SimpleNamespace(target=lambda: target))
    args = parse(["family", "--workdir", str(tmp_path), "--steps", "2", "--architectures", "medusa"])
    assert args.tokens_per_step is None and family.run_batch(args) == 2048
    assert family.chosen_rate(args, "medusa") == 0.002
    (tmp_path / "tune.json").unlink()
    assert family.run_batch(args) == 4096  # no sweep: the trainer's default


def test_train_commands_other_than_family_default_to_4096_tokens_per_step(monkeypatch):
    from gumiho_core.training import cli

    seen = {}
    monkeypatch.setitem(cli.COMMANDS, "evaluate", lambda args, models: seen.update(batch=args.tokens_per_step))
    assert cli.main(["evaluate"]) == 0 and seen["batch"] == 4096


def test_family_ship_ships_each_member_and_gives_every_card_the_comparison(target, features, tmp_path, monkeypatch):
    """Each member's heads into its own folder, each card with the same comparison section (the step curves at the
    same steps and the benchmark); the heads of an earlier version in Gumiho's folder move to <folder>-<version>."""
    import json

    from gumiho_core.training import card, family
    from gumiho_core.training.cli import build_parser

    assets = tmp_path / "assets"
    monkeypatch.setattr(card, "default_drafter_dir", lambda member="gumiho": assets / f"heads-{member}")
    old = assets / "heads-gumiho"
    old.mkdir(parents=True)
    (old / "config.json").write_text("{}")
    (old / "README.md").write_text("# old\n\n## Versions\n\n| version | steps |\n|---|---|\n| v15 | 18,348 |\n")
    points = {}
    for arch in ("gumiho", "medusa"):
        cfg = TrainConfig(architecture=arch, steps=2, tokens_per_step=384, micro_tokens=256, warmup_steps=1,
                          draft_vocab=0, holdout=0.1, precision="fp32", rollout="as-drafted")
        run = tmp_path / "work" / f"fam-{arch}"
        Trainer(target, features, cfg, run).run()
        methods = ["gumiho", "gumiho-serial"] if arch == "gumiho" else ["medusa"]
        report = {"prompts": 2, "max_new_tokens": 8, "draft": str(run / "drafter"),
                  **{m: {"mean_accept_len": 1.5, "per_depth": [0.5] + [float("nan")] * 6} for m in methods}}
        (run / "evaluation.json").write_text(json.dumps(report))
        points[arch] = [{"step": 2, "prompts": 2, "max_new_tokens": 8,
                         **{m: {"mean_accept_len": 1.5, "per_depth": [0.5]} for m in methods}}]
    (tmp_path / "work" / family.FAMILY_STEPS).write_text(json.dumps(points))
    bench = {"device": "cpu", "n_prompts": 2, "max_new_tokens": 8, "temperature": 0.0, "methods": {
        "ar": {"tokens_per_s": 10.0, "mean_accept_len": 1.0, "identical_prompts": 2, "speedup_vs_ar": 1.0},
        "medusa": {"tokens_per_s": 12.0, "mean_accept_len": 1.4, "identical_prompts": 2, "speedup_vs_ar": 1.2,
                   "draft_ms_per_step": 3.0, "per_depth": [0.4, 0.2]}}}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    (tmp_path / "corpus").mkdir()
    args = build_parser().parse_args(["family-ship", "--workdir", str(tmp_path / "work"), "--run", "fam",
                                      "--architectures", "gumiho,medusa", "--bench", str(tmp_path / "bench.json"),
                                      "--corpus", str(tmp_path / "corpus")])
    family.cmd_family_ship(args, SimpleNamespace(target=lambda: target))
    assert (assets / "heads-gumiho-v15" / "config.json").read_text() == "{}"  # v15, kept by its name
    for arch in ("gumiho", "medusa"):
        folder = assets / f"heads-{arch}"
        text = (folder / "README.md").read_text()
        assert (folder / "model.safetensors").is_file() and (folder / "family-steps.png").is_file()
        assert "## The comparison" in text and "| step | gumiho | medusa | gumiho-serial |" in text
        assert "| medusa | 12.00 | 1.20x | 1.40 | 3.0 | 2/2 | 0.40 0.20 |" in text
    assert json.loads((assets / "heads-medusa" / "config.json").read_text())["config"]["heads_read"] == "target"
