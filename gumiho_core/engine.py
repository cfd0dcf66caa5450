"""One decode loop: a step is draft -> verify -> commit, each step returns a frozen `StepRecord`.

`SpeculativeDecoder` (Gumiho or serial drafting) and `AutoregressiveDecoder` (one token per step)
share the step interface; `generate()` is a loop over `step()`; the app and the benchmarks
consume the same records. The first step of every session is the prefill: it reads the prompt and
produces the first token.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import torch

from .config import DecodeConfig, TreeConfig, check_method
from .drafter import GumihoDrafter
from .drafting import DraftContext, DraftPhase, build_tree
from .errors import GumihoError
from .kv_cache import keep_accepted
from .target import Target
from .timing import Stopwatch
from .tree import DraftTree
from .verify import Verdict, verify_greedy, verify_sampling, warp


@dataclass(frozen=True)
class StepRecord:
    index: int  # 0 is the prefill
    kind: str  # "prefill" | "speculative" | "autoregressive"
    tree: DraftTree | None
    phases: tuple[DraftPhase, ...]
    verdict: Verdict | None
    new_token_ids: tuple[int, ...]  # what this step appended to the output (after any stop truncation)
    draft_s: float
    verify_s: float
    commit_s: float
    total_new_tokens: int
    total_steps: int  # decoding steps so far, the prefill not counted
    compute_s: float  # seconds spent inside step() so far, the prefill included (pauses between steps excluded)
    done: bool
    stop_reason: str | None  # "eos" | "max_new_tokens" | "context" | None

    @property
    def seconds(self) -> float:
        return self.draft_s + self.verify_s + self.commit_s

    def to_dict(self) -> dict:
        v = self.verdict
        return {
            "index": self.index, "kind": self.kind,
            "tree": self.tree.to_dict() if self.tree else None,
            "phases": [{"name": p.name, "depths": list(p.depths), "candidates": p.candidates,
                        "seconds": round(p.seconds, 6)} for p in self.phases],
            "verdict": None if v is None else {
                "accepted": list(v.accepted), "bonus": v.bonus, "target_token": list(v.target_token),
                "target_prob": [None if math.isnan(p) else round(p, 5) for p in v.target_prob]},
            "new_token_ids": list(self.new_token_ids),
            "draft_s": round(self.draft_s, 6), "verify_s": round(self.verify_s, 6),
            "commit_s": round(self.commit_s, 6), "total_new_tokens": self.total_new_tokens,
            "total_steps": self.total_steps, "compute_s": round(self.compute_s, 6),
            "done": self.done, "stop_reason": self.stop_reason,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "StepRecord":
        v = d.get("verdict")
        return cls(
            index=int(d["index"]), kind=str(d["kind"]),
            tree=DraftTree.from_dict(d["tree"]) if d.get("tree") else None,
            phases=tuple(DraftPhase(str(p["name"]), tuple(int(x) for x in p["depths"]), int(p["candidates"]),
                                    float(p["seconds"])) for p in d.get("phases", [])),
            verdict=None if v is None else Verdict(
                tuple(int(x) for x in v["accepted"]), int(v["bonus"]), tuple(int(x) for x in v["target_token"]),
                tuple(float("nan") if x is None else float(x) for x in v["target_prob"])),
            new_token_ids=tuple(int(x) for x in d["new_token_ids"]),
            draft_s=float(d["draft_s"]), verify_s=float(d["verify_s"]), commit_s=float(d["commit_s"]),
            total_new_tokens=int(d["total_new_tokens"]), total_steps=int(d["total_steps"]),
            compute_s=float(d["compute_s"]), done=bool(d["done"]), stop_reason=d.get("stop_reason"),
        )


class Decoder:
    """What both decoders share: the prompt, the target's cache, sampling, stopping, counters."""

    kind = "abstract"

    def __init__(self, target: Target, prompt_ids, decode: DecodeConfig = DecodeConfig()):
        self.target, self.decode = target, decode
        self.prompt_ids = _check_prompt(prompt_ids, target)
        self.generated: list[int] = []
        self.steps = 0
        self.done = False
        self.stop_reason: str | None = None
        self.cache = target.new_cache()
        self.generator = torch.Generator(device=target.device).manual_seed(decode.seed)
        self._clock = Stopwatch(target.device)
        self._started = False
        self._compute = 0.0  # seconds inside step() so far
        self._step_t0 = 0.0

    # -- shared pieces ------------------------------------------------------------------------------
    @property
    def seq_len(self) -> int:
        return len(self.prompt_ids) + len(self.generated)

    def _pick(self, logits: torch.Tensor) -> int:
        """The target's next token from logits [V]: argmax, or a draw from the warped distribution."""
        if self.decode.greedy:
            return int(logits.argmax())
        probs = warp(logits, self.decode.temperature, self.decode.top_p)
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def _stop(self, new: list[int]) -> tuple[list[int], str | None]:
        """Cut `new` at the first end-of-sequence token or at the length limits."""
        left_new = self.decode.max_new_tokens - len(self.generated)
        left_ctx = self.target.max_len - self.seq_len
        room = min(left_new, left_ctx)
        for i, tok in enumerate(new[:room]):
            if self.decode.stop_on_eos and tok in self.target.eos_ids:
                return new[: i + 1], "eos"
        if len(new) >= room:
            return new[:room], "max_new_tokens" if left_new <= left_ctx else "context"
        return new, None

    def _prefill(self) -> torch.Tensor:
        """Read the prompt; returns its features [n, H] and appends the first token."""
        n = len(self.prompt_ids)
        ids = torch.tensor(self.prompt_ids, device=self.target.device)
        feats = self.target.forward(ids, torch.arange(n, device=ids.device), None, self.cache)
        return feats

    def _record(self, kind, new, reason, draft_s, verify_s, commit_s, tree=None, phases=(), verdict=None):
        self.generated += new
        self.done = reason is not None
        self.stop_reason = reason
        index = self.steps if kind == "prefill" else self.steps + 1
        if kind != "prefill":
            self.steps += 1
        self._compute += time.perf_counter() - self._step_t0
        return StepRecord(index, kind, tree, tuple(phases), verdict, tuple(new), draft_s, verify_s, commit_s,
                          len(self.generated), self.steps, self._compute, self.done, reason)

    def step(self) -> StepRecord:
        if self.done:
            raise GumihoError(f"this session has finished ({self.stop_reason}); start a new one")
        try:
            return self._step()
        except torch.cuda.OutOfMemoryError:
            self.done, self.stop_reason = True, "out_of_memory"
            torch.cuda.empty_cache()
            raise GumihoError("the GPU ran out of memory during this step: use a smaller tree (total_tokens), a "
                              "shorter prompt or fewer new tokens") from None

    @torch.inference_mode()
    def _step(self) -> StepRecord:
        self._clock.start()
        self._step_t0 = time.perf_counter()
        if not self._started:
            self._started = True
            feats = self._prefill()
            first = self._pick(self.target.logits(feats[-1:])[0])
            verify_s = self._clock.lap()
            new, reason = self._stop([first])
            if reason is None:
                self._after_prefill(feats, first)
            return self._record("prefill", new, reason, 0.0, verify_s, self._clock.lap())
        return self._decode_step()

    def _after_prefill(self, feats: torch.Tensor, first: int) -> None:
        pass

    def _decode_step(self) -> StepRecord:
        raise NotImplementedError


class AutoregressiveDecoder(Decoder):
    """Plain decoding: one target forward, one token per step. The baseline every speedup is measured against."""

    kind = "autoregressive"

    def _decode_step(self) -> StepRecord:
        pos = self.seq_len - 1
        last = torch.tensor([self.generated[-1]], device=self.target.device)
        feats = self.target.forward(last, torch.tensor([pos], device=last.device), None, self.cache)
        token = self._pick(self.target.logits(feats)[0])
        verify_s = self._clock.lap()
        new, reason = self._stop([token])
        return self._record(self.kind, new, reason, 0.0, verify_s, 0.0)


class SpeculativeDecoder(Decoder):
    """Draft a tree, verify it in one target forward, commit the accepted path and the bonus token."""

    kind = "speculative"

    def __init__(self, target: Target, drafter: GumihoDrafter, prompt_ids, decode: DecodeConfig = DecodeConfig(),
                 tree: TreeConfig = TreeConfig(), trace: bool = True):
        super().__init__(target, prompt_ids, decode)
        _check_tree(tree, drafter, target)
        self.tree_cfg = tree
        self.trace = trace  # per-phase timings (device syncs) and target probabilities in the records
        self.ctx = DraftContext(drafter)

    def _after_prefill(self, feats: torch.Tensor, first: int) -> None:
        # drafter pairs (f_i, x_{i+1}): each prompt feature with the token that follows it
        following = torch.tensor(self.prompt_ids[1:] + [first], device=feats.device)
        self.ctx.ingest(feats, following)

    def _decode_step(self) -> StepRecord:
        past = self.cache.get_seq_length()  # the root (last token) is not in the cache yet
        tree, phases = build_tree(self.ctx, self.generated[-1], self.tree_cfg,
                                  max_depth=self.target.max_len - self.seq_len,
                                  clock=self._clock if self.trace else None)
        draft_s = self._clock.lap() + (sum(p.seconds for p in phases) if self.trace else 0.0)  # traced: one clock
        verdict, feats = self._verify(tree, past)
        verify_s = self._clock.lap()
        new, reason = self._stop([tree.tokens[i] for i in verdict.accepted[1:]] + [verdict.bonus])
        if reason is None:
            self._commit(verdict, feats, past, new)
        commit_s = self._clock.lap()
        return self._record(self.kind, new, reason, draft_s, verify_s, commit_s, tree, phases, verdict)

    def _verify(self, tree: DraftTree, past: int) -> tuple[Verdict, torch.Tensor]:
        dev = self.target.device
        tokens = torch.tensor(tree.tokens, device=dev)
        mask = tree.attention_mask(past, self.target.dtype, dev)
        feats = self.target.forward(tokens, tree.position_ids(past, dev)[0], mask, self.cache)  # [n, H]
        logits = self.target.logits(feats)
        if self.decode.greedy:
            return verify_greedy(tree, logits, self.trace), feats
        probs = warp(logits, self.decode.temperature, self.decode.top_p)
        return verify_sampling(tree, probs, self.generator, self.trace), feats

    def _commit(self, verdict: Verdict, feats: torch.Tensor, past: int, new: list[int]) -> None:
        accepted = torch.tensor(verdict.accepted, device=feats.device)
        keep_accepted(self.cache, past, accepted)
        self.ctx.ingest(feats[accepted], torch.tensor(new, device=feats.device))


def _check_prompt(prompt_ids, target: Target) -> list[int]:
    ids = [int(t) for t in prompt_ids]
    if not ids:
        raise GumihoError("the prompt is empty: give at least one token")
    bad = [t for t in ids if not 0 <= t < target.vocab_size]
    if bad:
        raise GumihoError(f"prompt token id {bad[0]} is outside the vocabulary [0, {target.vocab_size})")
    if len(ids) >= target.max_len:
        raise GumihoError(f"the prompt has {len(ids)} tokens; this model's context holds {target.max_len}, "
                          f"so the prompt may have at most {target.max_len - 1}")
    return ids


def _check_tree(tree: TreeConfig, drafter: GumihoDrafter, target: Target) -> None:
    dc = drafter.cfg
    if tree.mode == "gumiho" and tree.depth > dc.serial_steps + dc.mlp_heads:
        raise GumihoError(f"depth {tree.depth} needs more heads than this drafter has: at most "
                          f"{dc.serial_steps + dc.mlp_heads} ({dc.serial_steps} serial steps + "
                          f"{dc.mlp_heads} MLP heads)")
    if tree.total_tokens > target.max_len:
        raise GumihoError(f"total_tokens {tree.total_tokens} exceeds the context length {target.max_len}")
    draft_vocab = drafter.shared.lm_head.shape[0]
    for name in ("top_k", "mlp_topk"):
        if getattr(tree, name) > draft_vocab:
            raise GumihoError(f"{name} {getattr(tree, name)} exceeds the draft vocabulary size {draft_vocab}")


def start(method: str, target: Target, prompt_ids, decode: DecodeConfig = DecodeConfig(),
          tree: TreeConfig = TreeConfig(), drafter: GumihoDrafter | None = None, trace: bool = True) -> Decoder:
    """A decoding session: method "gumiho" or "serial" (speculative, drafting mode = method) or "ar".

    trace=False skips what only a viewer needs (per-phase device syncs, target probabilities per node).
    """
    check_method(method)
    if method == "ar":
        return AutoregressiveDecoder(target, prompt_ids, decode)
    if drafter is None:
        raise GumihoError(f"method {method!r} needs a drafter; load one with load_drafter()")
    return SpeculativeDecoder(target, drafter, prompt_ids, decode, replace(tree, mode=method), trace)


@dataclass(frozen=True)
class RunResult:
    method: str
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]  # new tokens only
    steps: int  # decoding steps, the prefill not counted
    wall_s: float
    stop_reason: str | None
    records: tuple[StepRecord, ...]

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def mean_accept_len(self) -> float:
        """Tokens per target pass (bonus included), over decoding steps; the prefill's token is not counted."""
        return (self.new_tokens - 1) / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> dict:
        return {"method": self.method, "token_ids": list(self.token_ids), "steps": self.steps,
                "new_tokens": self.new_tokens, "mean_accept_len": round(self.mean_accept_len, 4),
                "wall_s": round(self.wall_s, 4), "tokens_per_s": round(self.tokens_per_s, 3),
                "stop_reason": self.stop_reason}


def generate(decoder: Decoder, method: str | None = None, keep_records: bool = True, on_step=None) -> RunResult:
    """Run a session to the end. on_step(record) is called after each step (progress bars, streaming)."""
    records = []
    t0 = time.perf_counter()
    while not decoder.done:
        rec = decoder.step()
        if keep_records:
            records.append(rec)
        if on_step is not None:
            on_step(rec)
    wall = time.perf_counter() - t0
    method = method or ("ar" if isinstance(decoder, AutoregressiveDecoder) else decoder.tree_cfg.mode)
    return RunResult(method, tuple(decoder.prompt_ids), tuple(decoder.generated), decoder.steps, wall,
                     decoder.stop_reason, tuple(records))
