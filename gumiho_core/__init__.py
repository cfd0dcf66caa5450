"""gumiho_core: Gumiho speculative decoding, exposed step by step.

Public API (the app and the CLIs use only these names):
    load_target, load_drafter, untrained_drafter      -- models (default: SmolLM2-135M-Instruct, offline)
    TreeConfig, DecodeConfig                           -- settings
    choose_tree, cached_tree_choice, TreeChoice        -- the tree with the best measured tokens/s here
    start, generate                                    -- a session and the loop over its steps
    StepRecord, RunResult, DraftTree, DraftPhase, Verdict
    encode_prompt, decode_tokens                       -- text at the edges
    GumihoError                                        -- every user-facing error
"""
from .acceptance import Acceptance
from .autotree import TreeChoice, cached_tree_choice, choose_tree
from .config import METHODS, TREE_MODES, DecodeConfig, TreeConfig
from .drafter import DrafterConfig, GumihoDrafter
from .drafting import DraftPhase
from .engine import generate, start
from .errors import GumihoError
from .models import DEFAULT_TARGET_NAME, load_drafter, load_target, resolve_device, untrained_drafter
from .records import STEP_KINDS, RunResult, StepRecord
from .target import Target
from .text import decode_tokens, encode_prompt, token_pieces
from .tree import DraftTree
from .verify import Verdict

__all__ = [
    "TreeChoice", "cached_tree_choice", "choose_tree", "Acceptance", "DEFAULT_TARGET_NAME", "load_drafter",
    "load_target", "resolve_device", "untrained_drafter", "decode_tokens", "encode_prompt", "token_pieces",
    "METHODS", "TREE_MODES", "DecodeConfig", "TreeConfig", "DrafterConfig", "GumihoDrafter", "DraftPhase", "RunResult",
    "StepRecord", "STEP_KINDS", "generate", "start", "GumihoError", "Target", "DraftTree", "Verdict",
]
