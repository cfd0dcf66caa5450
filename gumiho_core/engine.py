"""One decode loop: a step is draft -> verify -> commit, each step returns a frozen `StepRecord`.

`SpeculativeDecoder` (any drafting method of the registry) and `AutoregressiveDecoder` (one token per step)
share the step interface; `generate()` is a loop over `step()`; the app and the benchmarks
consume the same records. The first step of every session is the prefill: it reads the prompt and
produces the first token.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import replace

import torch

from .config import HYBRID, SERIAL, DecodeConfig, TreeConfig
from .drafter import GumihoDrafter
from .drafting import DraftContext, build_tree
from .errors import GumihoError
from .kv_cache import crop_cache, keep_accepted
from .methods import AR, check_drafter, method as method_named
from .records import AUTOREGRESSIVE, PREFILL, SPECULATIVE, RunResult, StepRecord
from .target import Target
from .timing import Stopwatch
from .tree import DraftTree
from .verify import Verdict, verify_greedy, verify_sampling, warp


class Decoder:
    """What both decoders share: the prompt, the target's cache, sampling, stopping, counters."""

    kind = "abstract"
    method = "abstract"  # what generate() reports: a name of the method registry
    tree_cfg: TreeConfig | None = None  # the draft tree's shape; None for plain decoding

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

    @property
    def last_token(self) -> int:
        """The last token produced: the next step's input (the root of its draft tree), not yet in the cache."""
        return self.generated[-1]

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
        """Read the prompt into the target's cache; returns its features [n, H] (the last one gives the first token)."""
        n = len(self.prompt_ids)
        ids = torch.tensor(self.prompt_ids, device=self.target.device)
        feats = self.target.forward(ids, torch.arange(n, device=ids.device), None, self.cache)
        return feats

    def _forward_last(self) -> torch.Tensor:
        """Features [1, H] of the last token at its position: a plain decoding step's forward (extends the cache)."""
        last = torch.tensor([self.last_token], device=self.target.device)
        return self.target.forward(last, torch.tensor([self.seq_len - 1], device=last.device), None, self.cache)

    @torch.inference_mode()
    def verify_forward(self, tree: DraftTree | None = None) -> torch.Tensor:
        """The target's logits [n, V] over `tree` (None: over the last token alone, as a plain step) after the
        current context, the cache left as it was: what one verification costs, for measuring."""
        past = self.cache.get_seq_length()
        feats = self._forward_last() if tree is None else self.target.forward_tree(tree, self.cache)
        logits = self.target.logits(feats)
        crop_cache(self.cache, past)
        return logits

    def _record(self, kind: str, new: list[int], reason: str | None, draft_s: float, verify_s: float,
                commit_s: float, tree: DraftTree | None = None, phases=(), verdict: Verdict | None = None,
                ) -> StepRecord:
        self.generated += new
        self.done = reason is not None
        self.stop_reason = reason
        if kind != PREFILL:
            self.steps += 1
        self._compute += time.perf_counter() - self._step_t0
        return StepRecord(index=self.steps, kind=kind, tree=tree, phases=tuple(phases), verdict=verdict,
                          new_token_ids=tuple(new), draft_s=draft_s, verify_s=verify_s, commit_s=commit_s,
                          total_new_tokens=len(self.generated), total_steps=self.steps, compute_s=self._compute,
                          done=self.done, stop_reason=reason)

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
            return self._record(PREFILL, new, reason, draft_s=0.0, verify_s=verify_s, commit_s=self._clock.lap())
        return self._decode_step()

    def _after_prefill(self, feats: torch.Tensor, first: int) -> None:
        pass

    def _decode_step(self) -> StepRecord:
        raise NotImplementedError


class AutoregressiveDecoder(Decoder):
    """Plain decoding: one target forward, one token per step. The baseline every speedup is measured against."""

    kind = AUTOREGRESSIVE
    method = AR

    def _decode_step(self) -> StepRecord:
        token = self._pick(self.target.logits(self._forward_last())[0])
        verify_s = self._clock.lap()
        new, reason = self._stop([token])
        return self._record(self.kind, new, reason, draft_s=0.0, verify_s=verify_s, commit_s=0.0)


class SpeculativeDecoder(Decoder):
    """Draft a tree, verify it in one target forward, commit the accepted path and the bonus token."""

    kind = SPECULATIVE

    def __init__(self, target: Target, drafter: GumihoDrafter, prompt_ids, decode: DecodeConfig = DecodeConfig(),
                 tree: TreeConfig = TreeConfig(), trace: bool = True, method: str | None = None):
        super().__init__(target, prompt_ids, decode)
        _check_tree(tree, drafter, target)
        self.tree_cfg = tree
        self.method = method or tree.mode
        self.trace = trace  # per-phase timings (device syncs) and target probabilities in the records
        self.drafter = drafter
        self.ctx = DraftContext(drafter)

    def draft(self, cfg: TreeConfig | None = None) -> DraftTree:
        """The tree this session would draft now (under `cfg`, default its own); the session is left as it was."""
        return build_tree(self.ctx, self.last_token, cfg or self.tree_cfg)[0]

    def _after_prefill(self, feats: torch.Tensor, first: int) -> None:
        # drafter pairs (f_i, x_{i+1}): each prompt feature with the token that follows it
        following = torch.tensor(self.prompt_ids[1:] + [first], device=feats.device)
        self.ctx.ingest(feats, following)

    def _decode_step(self) -> StepRecord:
        past = self.cache.get_seq_length()  # the root (last token) is not in the cache yet
        phase_clock = Stopwatch(self.target.device) if self.trace else None  # syncs the device per phase
        tree, phases = build_tree(self.ctx, self.last_token, self.tree_cfg,
                                  max_depth=self.target.max_len - self.seq_len, clock=phase_clock)
        draft_s = self._clock.lap()  # the whole draft, once: its phases are parts of it
        verdict, feats = self._verify(tree)
        verify_s = self._clock.lap()
        new, reason = self._stop([tree.tokens[i] for i in verdict.accepted[1:]] + [verdict.bonus])
        if reason is None:
            self._commit(verdict, feats, past, new)
        commit_s = self._clock.lap()
        return self._record(self.kind, new, reason, draft_s=draft_s, verify_s=verify_s, commit_s=commit_s, tree=tree,
                            phases=phases, verdict=verdict)

    def _verify(self, tree: DraftTree) -> tuple[Verdict, torch.Tensor]:
        feats = self.target.forward_tree(tree, self.cache)  # [n, H]
        logits = self.target.logits(feats)
        if self.decode.greedy:
            return verify_greedy(tree, logits, self.trace), feats
        probs = warp(logits, self.decode.temperature, self.decode.top_p)
        return verify_sampling(tree, probs, self.generator, self.trace), feats

    def _commit(self, verdict: Verdict, feats: torch.Tensor, past: int, new: list[int]) -> None:
        keep_accepted(self.cache, past, verdict.accepted)  # host ints: nodes already in place are not copied
        accepted = torch.tensor(verdict.accepted, device=feats.device)
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
    if tree.mode == HYBRID and tree.depth > dc.max_depth:
        raise GumihoError(f"depth {tree.depth} needs more heads than this drafter has: at most "
                          f"{dc.max_depth} ({dc.serial_steps} serial steps + "
                          f"{dc.mlp_heads} MLP heads)")
    if tree.mode == SERIAL and not dc.has_stack:
        raise GumihoError("this drafter has no serial stack (its heads read the target alone), so it cannot "
                          "draft serially at every depth")
    if tree.total_tokens > target.max_len:
        raise GumihoError(f"total_tokens {tree.total_tokens} exceeds the context length {target.max_len}")
    for name in ("top_k", "mlp_topk"):
        if getattr(tree, name) > drafter.draft_vocab_size:
            raise GumihoError(f"{name} {getattr(tree, name)} exceeds the draft vocabulary size "
                              f"{drafter.draft_vocab_size}")


def start(method: str, target: Target, prompt_ids, decode: DecodeConfig = DecodeConfig(),
          tree: TreeConfig = TreeConfig(), drafter: GumihoDrafter | None = None, trace: bool = True) -> Decoder:
    """A decoding session of a registered method (methods.py): its drafter drafts `tree` in the method's mode.

    trace=False skips what only a viewer needs (per-phase device syncs, target probabilities per node).
    """
    m = method_named(method)
    if not m.speculative:
        return AutoregressiveDecoder(target, prompt_ids, decode)
    if drafter is None:
        raise GumihoError(f"method {m.name!r} needs a drafter; load one with load_drafter()")
    check_drafter(m.name, drafter.cfg)
    return SpeculativeDecoder(target, drafter, prompt_ids, decode, replace(tree, mode=m.mode), trace, m.name)


def generate(decoder: Decoder, method: str | None = None, keep_records: bool = True, on_step=None,
             lock=None) -> RunResult:
    """Run a session to the end: the one decode loop. on_step(record) is called after each step (progress
    bars, streaming). `lock` (e.g. a threading.Lock shared by several sessions) is held for each step only,
    so sessions take turns step by step; wall_s counts the time inside the steps, waits for the lock excluded."""
    records, wall = [], 0.0
    while not decoder.done:
        with lock or contextlib.nullcontext():
            t0 = time.perf_counter()
            rec = decoder.step()
            wall += time.perf_counter() - t0
        if keep_records:
            records.append(rec)
        if on_step is not None:
            on_step(rec)
    return RunResult(method=method or decoder.method, prompt_ids=tuple(decoder.prompt_ids),
                     token_ids=tuple(decoder.generated), steps=decoder.steps, wall_s=wall,
                     stop_reason=decoder.stop_reason, records=tuple(records), decode=decoder.decode,
                     tree=decoder.tree_cfg)
