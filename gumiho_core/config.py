"""Frozen, validated settings: the draft tree, decoding, the drafter's architecture. Every default lives
here and only here, and so do the names every front end shares (methods, tree modes, tree fields)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .errors import GumihoError

# How a drafter fills the tree's levels (TreeConfig.mode): "hybrid" runs its serial stack for its serial steps and
# its parallel heads below them (Gumiho; Medusa has no serial steps), "serial" runs the stack at every depth
# (EAGLE-2). Which method drafts which way is the method registry's business (methods.py).
HYBRID, SERIAL = "hybrid", "serial"
TREE_MODES = (HYBRID, SERIAL)
TREE_MODE_ALIASES = {"gumiho": HYBRID}  # run files and caches written before the drafter family
# What the parallel heads read: the serial steps' fused outputs (Gumiho), or the target's last feature (Medusa).
HEADS_READ = ("serial", "target")
MAX_TREE_TOKENS = 1024  # a sanity bound; the context length is checked per session
MAX_SEED = 2**64 - 1  # what a torch.Generator takes
# Which candidates of serial levels 2+ may be chosen into the tree. "paper": each method's own rule -- Gumiho
# (the authors' topK_genrate) pools only the top_k kept to be expanded, serial drafting (EAGLE-2) pools all
# top_k * top_k. "all": EAGLE-2's rule for Gumiho too.
POOLS = ("paper", "all")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise GumihoError(message)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_ints(cfg, names, least: int, what: str = "") -> None:
    for name in names:
        value = getattr(cfg, name)
        _check(_is_int(value) and value >= least, f"{what}{name} must be an integer >= {least}; got {value!r}")


@dataclass(frozen=True)
class DrafterConfig:
    """The draft network's architecture (docs/method.md): the target's layer shapes, a serial stack of num_layers
    LLaMA layers trained for serial_steps steps, and mlp_heads parallel MLP heads of res_blocks residual blocks
    that read `heads_read` (HEADS_READ). The family's members are presets of it (ARCHITECTURES)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_parameters: dict = field(default_factory=lambda: {"rope_type": "default", "rope_theta": 10000.0})
    max_position_embeddings: int = 4096
    hidden_act: str = "silu"
    attention_bias: bool = False
    num_layers: int = 2
    serial_steps: int = 2
    mlp_heads: int = 5
    res_blocks: int = 5
    heads_read: str = "serial"

    def __post_init__(self):
        _check_ints(self, ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                           "head_dim", "vocab_size"), 1, "drafter config: ")
        _check_ints(self, ("num_layers", "serial_steps", "mlp_heads", "res_blocks"), 0, "drafter config: ")
        _check(not self.num_attention_heads % self.num_key_value_heads,
               f"drafter config: num_attention_heads {self.num_attention_heads} is not a multiple "
               f"of num_key_value_heads {self.num_key_value_heads}")
        _check(self.heads_read in HEADS_READ,
               f"drafter config: heads_read must be one of {', '.join(HEADS_READ)}; got {self.heads_read!r}")
        _check((self.num_layers == 0) == (self.serial_steps == 0),
               f"drafter config: a serial stack needs serial steps and serial steps need a stack; got "
               f"num_layers {self.num_layers}, serial_steps {self.serial_steps}")
        _check(self.heads_read == "target" or not self.mlp_heads or self.serial_steps,
               "drafter config: heads that read the serial steps need at least one serial step")
        _check(self.num_layers or self.mlp_heads, "drafter config: no serial stack and no heads: nothing drafts")

    @property
    def max_depth(self) -> int:
        """The deepest draft level in hybrid mode: the serial steps, then one level per MLP head."""
        return self.serial_steps + self.mlp_heads

    @property
    def has_stack(self) -> bool:
        """Whether there is a serial stack (and its input fusion fc): what serial drafting needs."""
        return self.num_layers > 0

    @property
    def heads_in(self) -> int:
        """Width of the parallel heads' input: the serial steps' fused outputs side by side, or one feature."""
        return self.hidden_size * (self.serial_steps if self.heads_read == "serial" else 1)

    @classmethod
    def from_target(cls, cfg, architecture: str = "gumiho", **overrides) -> "DrafterConfig":
        """A family member's draft architecture (ARCHITECTURES) for a target: its LLaMA layer shapes."""
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        rope = dict(getattr(cfg, "rope_parameters", None) or {"rope_type": "default", "rope_theta": cfg.rope_theta})
        base = dict(
            hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
            num_attention_heads=cfg.num_attention_heads,
            num_key_value_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
            head_dim=head_dim, vocab_size=cfg.vocab_size, rms_norm_eps=float(cfg.rms_norm_eps),
            rope_parameters=rope, max_position_embeddings=cfg.max_position_embeddings,
            hidden_act=getattr(cfg, "hidden_act", "silu"),
        )
        _check(architecture in ARCHITECTURES,
               f"architecture must be one of {', '.join(ARCHITECTURES)}; got {architecture!r}")
        base.update(ARCHITECTURES[architecture])
        base.update(overrides)
        return cls(**base)


MAX_DEPTH = DrafterConfig.serial_steps + DrafterConfig.mlp_heads  # the published drafters' deepest level (2 + 5)

# The drafter family: one architecture each, as data. Every member drafts MAX_DEPTH levels when trained.
ARCHITECTURES = {
    # Gumiho: a 2-layer transformer drafts depths 1-2 one after the other, 5 MLP heads depths 3-7 at once.
    "gumiho": dict(num_layers=2, serial_steps=2, mlp_heads=5, heads_read="serial"),
    # EAGLE-2 style: ONE transformer layer, run at every depth (their published configs: num_hidden_layers 1).
    "eagle": dict(num_layers=1, serial_steps=MAX_DEPTH, mlp_heads=0, heads_read="serial"),
    # Medusa style (Medusa-1): no serial stack; one head per depth, each ONE residual SiLU block on the target's
    # last feature, then the shared lm_head.
    "medusa": dict(num_layers=0, serial_steps=0, mlp_heads=MAX_DEPTH, res_blocks=0, heads_read="target"),
}


@dataclass(frozen=True)
class TreeConfig:
    """Shape of the draft tree. Defaults are the Gumiho authors' (docs/method.md, "Drafting a tree").

    mode:         "hybrid" (the serial steps, then the MLP heads) or "serial" (the serial stack at every depth).
    top_k:        children kept per expanded node, and nodes expanded per serial level.
    mlp_topk:     tokens per MLP-head distribution entering the beam.
    pruning:      beam width at each MLP level.
    total_tokens: nodes verified per step, root included.
    depth:        deepest draft level (in hybrid mode at most the drafter's serial steps + MLP heads).
    pool:         which serial-level candidates may enter the tree (POOLS).
    """

    mode: str = HYBRID
    top_k: int = 14
    mlp_topk: int = 35
    pruning: int = 35
    total_tokens: int = 64
    depth: int = MAX_DEPTH
    pool: str = "paper"

    def __post_init__(self):
        if self.mode in TREE_MODE_ALIASES:
            object.__setattr__(self, "mode", TREE_MODE_ALIASES[self.mode])
        _check(self.mode in TREE_MODES, f"tree mode must be one of {', '.join(TREE_MODES)}; got {self.mode!r}")
        _check(self.pool in POOLS, f"pool must be one of {', '.join(POOLS)}; got {self.pool!r}")
        _check_ints(self, ("top_k", "mlp_topk", "pruning", "depth"), 1)
        _check(
            _is_int(self.total_tokens) and 2 <= self.total_tokens <= MAX_TREE_TOKENS,
            f"total_tokens must be an integer in [2, {MAX_TREE_TOKENS}] (root included); got {self.total_tokens!r}",
        )

    def with_(self, **changes) -> "TreeConfig":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


TREE_FIELDS = tuple(f.name for f in fields(TreeConfig) if f.name not in ("mode", "pool"))  # the shape: top_k..depth


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode: length, randomness and stopping."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop_on_eos: bool = True

    def __post_init__(self):
        _check(
            _is_int(self.max_new_tokens) and self.max_new_tokens >= 1,
            f"max_new_tokens must be an integer >= 1; got {self.max_new_tokens!r}",
        )
        _check(
            isinstance(self.temperature, (int, float)) and 0 <= self.temperature <= 100,
            f"temperature must be a number in [0, 100] (0 = greedy); got {self.temperature!r}",
        )
        _check(
            isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1,
            f"top_p must be a number in (0, 1]; got {self.top_p!r}",
        )
        _check(_is_int(self.seed) and 0 <= self.seed <= MAX_SEED,
               f"seed must be an integer in [0, {MAX_SEED}] (0 to 2**64 - 1); got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
