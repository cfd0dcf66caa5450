"""The training-data pipeline: continuous batching equals plain decoding, parts round-trip, runs resume."""
import numpy as np
import pytest
import torch

from gumiho_core import DecodeConfig, generate, start
from gumiho_core.training.corpus import Conversation, read_corpus, read_part, write_part
from gumiho_core.training.distill import parse_modes
from gumiho_core.training.distill import DistillConfig, batched_features, extract_part_features, generate_corpus
from gumiho_core.training.sampler import BatchSampler, Request
from tiny import tiny_target


def _prompts(n, seed=1, vocab=97):
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(6, vocab, (int(torch.randint(1, 12, (), generator=g)),), generator=g).tolist())
            for _ in range(n)]


def _plain(target, prompt, max_new):
    return list(generate(start("ar", target, list(prompt), DecodeConfig(max_new_tokens=max_new))).token_ids)


def test_continuous_batching_equals_plain_greedy_and_records_true_features():
    target = tiny_target(eos=5, scale=3.0)
    sampler = BatchSampler(target, rows=4, max_new_tokens=30, max_prompt=12, generator=torch.Generator())
    sampler.cache.slots = 60  # few slots: the run must compact the cache many times
    answers = list(sampler.run(Request(i, p, 0.0) for i, p in enumerate(_prompts(23))))
    assert sorted(a.key for a in answers) == list(range(23))
    lengths = {len(a.answer_ids) for a in answers}
    assert len(lengths) > 1, "the prompts should end at different steps (rows refilled mid-run)"
    for a in answers:
        assert list(a.answer_ids) == _plain(target, a.prompt_ids, 30), f"request {a.key}"
        ids = torch.tensor(list(a.prompt_ids) + list(a.answer_ids))
        fresh = target.forward(ids, torch.arange(len(ids)), None, target.new_cache())  # [T, H]
        assert a.features.shape == fresh.shape
        torch.testing.assert_close(a.features.float(), fresh.half().float(), atol=2e-3, rtol=1e-2)


def test_sampling_rows_draw_from_the_target_distribution():
    """One-token answers at T=1 from a single prompt: the empirical first-token law matches softmax(logits)."""
    target = tiny_target(eos=None, vocab=11, scale=0.5)
    prompt = (3, 7, 2)
    sampler = BatchSampler(target, rows=8, max_new_tokens=1, max_prompt=3, generator=torch.Generator().manual_seed(0),
                           record_features=False)
    draws = [a.answer_ids[0] for a in sampler.run(Request(i, prompt, 1.0) for i in range(4000))]
    feats = target.forward(torch.tensor(prompt), torch.arange(3), None, target.new_cache())
    p = torch.softmax(target.logits(feats[-1:])[0], -1).detach().numpy()
    freq = np.bincount(draws, minlength=11) / len(draws)
    assert np.abs(freq - p).max() < 0.03, (freq.round(3), p.round(3))


def test_corpus_part_round_trip_and_uint16_guard(tmp_path):
    rows = [Conversation("abc", "greedy", (1, 2, 3), (4, 5)), Conversation("def", "t0.7", (9,), (65535, 0))]
    write_part(tmp_path / "answers-w0-0000.npz", rows, "tiny")
    assert read_part(tmp_path / "answers-w0-0000.npz") == rows
    with pytest.raises(Exception, match="uint16"):
        write_part(tmp_path / "answers-w0-0001.npz", [Conversation("x", "greedy", (70000,), (1,))], "tiny")


class _Tok:
    """The chat template of a tiny target: the prompt text's characters as token ids."""
    chat_template = None

    def __call__(self, text):
        return {"input_ids": [6 + ord(c) % 90 for c in text]}


def test_generate_corpus_resumes_and_features_are_remade(tmp_path):
    target = tiny_target(eos=5, scale=3.0)
    target.tokenizer = _Tok()
    prompts = [{"prompt": f"question {i}"} for i in range(10)]
    modes = parse_modes("greedy,t1.0")
    cfg = DistillConfig(rows=3, max_new_tokens=8, part_size=7)
    corpus, feats = tmp_path / "corpus", tmp_path / "features"
    assert generate_corpus(target, prompts[:6], modes, corpus, feats, cfg) == 12
    assert generate_corpus(target, prompts, modes, corpus, feats, cfg) == 8  # only the new pairs
    rows = read_corpus(corpus)
    assert sorted((r.prompt_key, r.mode) for r in rows) == sorted({(r.prompt_key, r.mode) for r in rows})
    assert len(rows) == 20
    greedy = [r for r in rows if r.mode == "greedy"]
    assert all(list(r.answer_ids) == _plain(target, r.prompt_ids, 8) for r in greedy)
    kept = {p.name: p.read_bytes() for p in feats.iterdir()}
    for p in feats.iterdir():
        p.unlink()
    assert extract_part_features(target, corpus, feats) == len(kept)  # a fresh machine: ids only
    assert extract_part_features(target, corpus, feats) == 0
    seqs = [r.ids for r in rows[:5]]
    again = batched_features(target, seqs, max_batch_tokens=16)
    for s, f in zip(seqs, again):
        fresh = target.forward(torch.tensor(s), torch.arange(len(s)), None, target.new_cache())
        torch.testing.assert_close(f.float(), fresh.half().float(), atol=2e-3, rtol=1e-2)


def test_workers_split_the_requests_without_overlap():
    keys = [(f"{i:012x}", m) for i in range(200) for m in ("greedy", "t0.7")]
    owners = [[DistillConfig(worker=w, workers=3).mine(k, m) for w in range(3)] for k, m in keys]
    assert all(sum(o) == 1 for o in owners)
    assert min(sum(o[w] for o in owners) for w in range(3)) > 100


# -- training prompts ---------------------------------------------------------------------------
from pathlib import Path  # noqa: E402

from gumiho_core.jsonl import read_jsonl  # noqa: E402
from gumiho_core.training.prompts import DedupIndex, keep_new, passage_in, questions_in  # noqa: E402
from gumiho_core.training.workspace import training_prompt_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_questions_and_passages_are_parsed_from_what_the_target_wrote():
    text = " What is a volcano?\n2. How do volcanoes form.\n3. **Why do some volcanoes sleep for centuries?**\nok?"
    assert questions_in(text) == ["What is a volcano?", "Why do some volcanoes sleep for centuries?"]
    long = "The farmer waited. " * 15 + "Then rain came, and the wheat"
    assert passage_in(long).endswith("waited.") and passage_in("Too short.") is None


def test_near_copies_of_evaluation_prompts_never_become_training_prompts():
    held = ["Why does the ocean taste salty?", "Compose a light-hearted eulogy for a goldfish named Bubbles."]
    cands = [{"prompt": "Why does the ocean taste so salty?", "source": "target-question"},
             {"prompt": "Compose a light-hearted eulogy for a goldfish named Bubbles who was six.", "source": "template"},
             {"prompt": "Why does the sea look blue on sunny days?", "source": "target-question"},
             {"prompt": "Why does the sea look blue on sunny days??", "source": "target-question"},
             {"prompt": "Write a haiku about pets.", "source": "template"},
             {"prompt": "Write a haiku about sleep.", "source": "template"}]
    kept = [r["prompt"] for r in keep_new(cands, known=[], excluded=held)]
    assert kept == ["Why does the sea look blue on sunny days?", "Write a haiku about pets.",
                    "Write a haiku about sleep."]


def test_the_training_prompt_files_hold_no_near_copy_of_an_evaluation_prompt():
    banned = DedupIndex()
    for name in ("heldout.jsonl", "mtbench_style.jsonl"):
        for row in read_jsonl(ROOT / "prompts" / name, required=("prompt",)):
            banned.add(row["prompt"])
    rows = [r for f in training_prompt_files() for r in read_jsonl(f, required=("prompt",))]
    assert len(rows) >= 694
    leaks = [r["prompt"] for r in rows if banned.near(r["prompt"])]
    assert not leaks, leaks[:3]


def test_draw_samples_each_row_from_its_own_softmax_and_never_a_zero_weight_token():
    """Inverse-CDF sampling: per-row frequencies match softmax(logits) (3 sigma), -inf tokens never come out."""
    from gumiho_core.training.sampler import draw

    logits = torch.tensor([[0.0, 1.0, 2.0, float("-inf"), -1.0], [5.0, float("-inf"), 5.0, 0.0, -30.0]])
    n = 20000
    picks = draw(logits.repeat(n, 1), torch.Generator().manual_seed(1)).view(n, 2)
    for row in range(2):
        p = torch.softmax(logits[row], -1).numpy()
        freq = np.bincount(picks[:, row].numpy(), minlength=5) / n
        assert np.all(np.abs(freq - p) <= 3 * np.sqrt(p * (1 - p) / n) + 1e-9), (row, freq.round(4), p.round(4))
    assert not (picks[:, 0] == 3).any() and not (picks[:, 1] == 1).any()


def test_the_committed_corpus_answers_only_training_prompts():
    """Every conversation in data/ answers a prompt of the training files, and none an evaluation prompt."""
    from gumiho_core.training.corpus import prompt_key

    folder = ROOT / "data" / "smollm2-135m-instruct"
    if not folder.is_dir():
        pytest.skip("no committed corpus in this checkout")
    keys = {r.prompt_key for r in read_corpus(folder)}
    train = {prompt_key(r["prompt"]) for f in training_prompt_files() for r in read_jsonl(f, required=("prompt",))}
    evaluation = {prompt_key(r["prompt"]) for f in ("heldout.jsonl", "mtbench_style.jsonl")
                  for r in read_jsonl(ROOT / "prompts" / f, required=("prompt",))}
    assert keys and keys <= train, sorted(keys - train)[:3]
    assert not keys & evaluation


def test_every_make_prompts_file_is_read_as_training_prompts_by_default():
    """generate-data's default prompts: the hand-written file, then each prompts/train_generated*.jsonl, so a
    make-prompts run with its own --topics and --out adds prompts without rewriting the earlier files."""
    from types import SimpleNamespace

    from gumiho_core.training.workspace import training_prompts

    names = [f.name for f in training_prompt_files()]
    assert names[:2] == ["train.jsonl", "train_generated.jsonl"] and "train_generated_2.jsonl" in names
    rows = training_prompts(SimpleNamespace(prompts=None))
    sizes = [sum(1 for line in f.read_text().splitlines() if line.strip()) for f in training_prompt_files()]
    assert len(rows) == sum(sizes) and len(rows) >= 694 + 1276 + 848


@pytest.mark.parametrize("topics,out,match", [
    ("missing.json", "prompts/train_generated_9.jsonl", "--topics .*missing.json: not a readable JSON file"),
    ("bad.json", "prompts/train_generated_9.jsonl", "--topics .*bad.json: expected"),
    ("prompts/seed_topics_2.json", "prompts/heldout.jsonl", "--out prompts/heldout.jsonl: make-prompts would "
                                                            "overwrite"),
    ("prompts/seed_topics_2.json", "prompts/train.jsonl", "would overwrite prompts that are not its own"),
])
def test_make_prompts_refuses_bad_topics_and_protected_outputs_before_loading_the_model(tmp_path, monkeypatch,
                                                                                         topics, out, match):
    from types import SimpleNamespace

    from gumiho_core.errors import GumihoError
    from gumiho_core.training.data_commands import cmd_make_prompts

    (tmp_path / "bad.json").write_text('{"math": "fractions"}')
    monkeypatch.chdir(ROOT)
    topics = topics if topics.startswith("prompts/") else str(tmp_path / topics)
    models = SimpleNamespace(data_target=lambda: pytest.fail("the model was loaded before the arguments were checked"))
    with pytest.raises(GumihoError, match=match):
        cmd_make_prompts(SimpleNamespace(topics=topics, out=out, rows=4, seed=0), models)
    assert (ROOT / "prompts" / "heldout.jsonl").stat().st_size > 0
