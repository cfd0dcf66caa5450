"""More training prompts: hand-written task templates over seed topics, and questions the target writes.

Three sources, all from `prompts/seed_topics.json` (category -> topics, written by hand):
- task templates (TEMPLATES), one prompt per (template, topic);
- questions: the target continues a raw "Frequently asked questions about <topic>" list, and the
  numbered lines that read as questions are kept;
- passages: the target writes a short text on a topic, and a hand-written instruction asks to
  summarise it or pull facts out of it.
Near-duplicates (of each other, of the existing training prompts, and of every evaluation prompt)
are dropped: no prompt of prompts/heldout.jsonl or prompts/mtbench_style.jsonl, nor a near-copy of
one, may become training data.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ..target import Target
from ..text import encode_prompt
from .sampler import BatchSampler, Request

TEMPLATES = {
    "writing": ["Write a short poem about {topic}.", "Write a very short story (under 150 words) about {topic}.",
                "Write a diary entry about {topic}.", "Describe {topic} in one vivid paragraph.",
                "Write a haiku about {topic}.", "Write a letter to a friend about {topic}."],
    "roleplay": ["You are {topic}. Introduce yourself to a new visitor.",
                 "Pretend to be {topic} and describe a typical day.",
                 "Act as {topic}. What advice would you give to a beginner?",
                 "Stay in character as {topic} and tell me about the hardest part of your work."],
    "reasoning": ["Give me a simple puzzle about {topic} and then solve it step by step.",
                  "Explain, step by step, how to think about {topic}.",
                  "What is a common mistake people make with {topic}, and how can it be avoided?"],
    "math": ["Make up a word problem about {topic} and solve it step by step.",
             "Explain {topic} with a worked example.",
             "What is a common mistake students make with {topic}? Show an example."],
    "coding": ["Explain {topic} to a beginner with a short code example.",
               "Write a short Python example that shows {topic}, and explain each line.",
               "What are the most common errors with {topic}, and how do I fix them?"],
    "stem": ["Explain {topic} in simple terms.", "What are three interesting facts about {topic}?",
             "Why does {topic} matter in everyday life?"],
    "humanities": ["Give me a short overview of {topic}.", "What are three interesting facts about {topic}?",
                   "Why is {topic} still worth learning about today?"],
    "qa": ["What are some good tips about {topic}?", "What should a beginner know about {topic}?",
           "What are three common myths about {topic}?"],
}
FAQ_HEADERS = ("Frequently asked questions about {topic}", "Questions students often ask about {topic}",
               "Common beginner questions about {topic}")
PASSAGE_REQUEST = "Write {topic}, about five sentences long."
PASSAGE_TASKS = {
    "summarization": ["Summarize the following text in two sentences.\n\n{passage}",
                      "What is the main point of this text? Answer in one sentence.\n\n{passage}"],
    "extraction": ["List every name, number and date mentioned in this text.\n\n{passage}",
                   "Read the text below and list its key facts as bullet points.\n\n{passage}"],
}


# -- near-duplicates --------------------------------------------------------------------------
def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def shingles(text: str, n: int = 3) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(max(1, len(w) - n + 1))}


@dataclass
class DedupIndex:
    """Texts seen so far; a new one is a near-duplicate if their word-trigram sets overlap by Jaccard >=
    threshold, or (with `heads`) if it shares its first six words with one."""

    threshold: float = 0.5
    heads_rule: bool = True

    def __post_init__(self):
        self.heads: set[tuple[str, ...]] = set()
        self.sets: list[set] = []
        self.by_gram: dict[tuple, list[int]] = {}

    def near(self, text: str) -> bool:
        head, grams = tuple(words(text)[:6]), shingles(text)
        if self.heads_rule and len(head) == 6 and head in self.heads:
            return True
        counts: dict[int, int] = {}
        for g in grams:
            for i in self.by_gram.get(g, ()):
                counts[i] = counts.get(i, 0) + 1
        return any(c / len(grams | self.sets[i]) >= self.threshold for i, c in counts.items())

    def add(self, text: str) -> None:
        self.heads.add(tuple(words(text)[:6]))
        self.sets.append(shingles(text))
        for g in self.sets[-1]:
            self.by_gram.setdefault(g, []).append(len(self.sets) - 1)


# -- parsing what the target wrote ------------------------------------------------------------
def questions_in(text: str) -> list[str]:
    """The numbered lines of a generated FAQ list that read as questions ("2. How do ...?")."""
    found = []
    for line in ("1." + text).splitlines():
        m = re.match(r"\s*\d+[.)]\s*(.+)$", line)
        q = m.group(1).strip().strip("*").strip() if m else ""
        if q.endswith("?") and 4 <= len(q.split()) <= 30 and q.isascii() and q[0].isupper():
            found.append(q)
    return found


def passage_in(text: str) -> str | None:
    """A generated passage fit to be worked on: 40-200 words of plain text, cut at its last full sentence."""
    text = text.strip()
    end = max(text.rfind("."), text.rfind("!"), text.rfind("?"))
    text = text[:end + 1] if end > 0 else ""
    return text if 40 <= len(text.split()) <= 200 and text.isascii() else None


# -- the three sources --------------------------------------------------------------------------
def template_prompts(topics: dict[str, list[str]]) -> list[dict]:
    return [{"category": cat, "prompt": t.format(topic=topic), "source": "template"}
            for cat, temps in TEMPLATES.items() for t in temps for topic in topics.get(cat, [])]


def _complete(target: Target, texts: list[str], raw: bool, max_new: int, temperature: float, seed: int,
              rows: int) -> list[str]:
    """The target's continuation of each text (sampled), in order."""
    encoded = [tuple(encode_prompt(target.tokenizer, t, raw=raw)) for t in texts]
    sampler = BatchSampler(target, rows, max_new, max(map(len, encoded)), torch.Generator().manual_seed(seed),
                           record_features=False)
    out = {a.key: a.answer_ids for a in sampler.run(Request(i, e, temperature) for i, e in enumerate(encoded))}
    return [target.tokenizer.decode(out[i], skip_special_tokens=True) for i in range(len(texts))]


def written_questions(target: Target, topics: dict[str, list[str]], samples: int, seed: int,
                      rows: int) -> list[dict]:
    jobs = [(cat, h.format(topic=t)) for cat in ("stem", "humanities", "qa", "coding", "math")
            for t in topics.get(cat, []) for h in FAQ_HEADERS for _ in range(samples)]
    texts = _complete(target, [f"{header}\n\n1." for _, header in jobs], True, 120, 0.8, seed, rows)
    return [{"category": cat, "prompt": q, "source": "target-question"}
            for (cat, _), text in zip(jobs, texts) for q in questions_in(text)]


def passage_prompts(target: Target, topics: dict[str, list[str]], samples: int, seed: int,
                    rows: int) -> list[dict]:
    jobs = [(cat, t) for cat in PASSAGE_TASKS for t in topics.get(cat, []) for _ in range(samples)]
    texts = _complete(target, [PASSAGE_REQUEST.format(topic=t) for _, t in jobs], False, 260, 0.7, seed, rows)
    out = []
    for k, ((cat, _), text) in enumerate(zip(jobs, texts)):
        passage = passage_in(text)
        if passage:
            task = PASSAGE_TASKS[cat][k % len(PASSAGE_TASKS[cat])]
            out.append({"category": cat, "prompt": task.format(passage=passage), "source": "target-passage",
                        "dedup_text": passage})
    return out


def keep_new(candidates: Iterable[dict], known: Iterable[str], excluded: Iterable[str]) -> list[dict]:
    """The candidates to add: none is a near-copy of an excluded (evaluation) prompt; none of those the
    target wrote is a near-copy of a known prompt or of one kept before it (a template's prompts differ only
    by their topic, by design, so they are checked against the excluded ones and for exact copies only)."""
    banned, index = DedupIndex(), DedupIndex(heads_rule=False)
    for text in excluded:
        banned.add(text)
    for text in known:
        index.add(text)
    seen, kept = set(known), []
    for row in candidates:
        text = row["prompt"]
        if text in seen or banned.near(text):
            continue
        if row["source"] != "template":
            mine = row.get("dedup_text", text)
            if index.near(mine):
                continue
            index.add(mine)
        seen.add(text)
        kept.append({k: v for k, v in row.items() if k != "dedup_text"})
    return kept
