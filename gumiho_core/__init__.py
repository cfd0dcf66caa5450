"""gumiho_core: Gumiho speculative decoding, exposed step by step.

Public API (the app and the CLIs use only these names):
    load_target, load_drafter, untrained_drafter      -- models (default: SmolLM2-135M-Instruct, offline)
    TreeConfig, DecodeConfig                           -- settings
    start, generate                                    -- a session and the loop over its steps
    StepRecord, RunResult, DraftTree, DraftPhase, Verdict
    encode_prompt, decode_tokens                       -- text at the edges
    GumihoError                                        -- every user-facing error
"""
from .config import METHODS, DecodeConfig, TreeConfig
from .drafter import DrafterConfig, GumihoDrafter
from .drafting import DraftPhase
from .engine import RunResult, StepRecord, generate, start
from .errors import GumihoError
from .target import Target
from .tree import DraftTree
from .verify import Verdict

__all__ = [
    "METHODS", "DecodeConfig", "TreeConfig", "DrafterConfig", "GumihoDrafter", "DraftPhase", "RunResult",
    "StepRecord", "generate", "start", "GumihoError", "Target", "DraftTree", "Verdict",
]
