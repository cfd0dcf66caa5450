"""gumiho_core: Gumiho speculative decoding, exposed step by step.

Public API (the app and the CLIs use only these names):
    load_target, load_drafter, untrained_drafter, has_default_heads
                                                       -- models (default: SmolLM2-135M-Instruct, offline)
    TreeConfig, DecodeConfig, DrafterConfig            -- settings
    METHODS (GUMIHO, EAGLE, MEDUSA, GUMIHO_SERIAL, AR), REGISTRY, Method, method, check_method, DRAFTING_METHODS,
    drafters_for                                       -- the method registry (methods.py)
    ARCHITECTURES, TREE_MODES (HYBRID, SERIAL), TREE_FIELDS, MAX_DEPTH, MAX_TREE_TOKENS, MAX_SEED
                                                       -- the drafter family, and the bounds every front end shares
    choose_tree, cached_tree_choice, TreeChoice        -- the auto tree: measured here (the MLP rule, and the fastest)
    resolve_tree, ResolvedTree, TREE_REQUESTS, TREE_PRESETS (PAPER, CLASSROOM, SMALL), AUTO, FASTEST, MEASURED, CUSTOM,
    fallback_preset, preset_of                         -- which tree a run uses: one function for every front end
    prediction_gap, mark_stale, REMEASURE_GAP          -- when a run says the measurement no longer holds
    what_if, WhatIf, CostCurve, StepCosts, flat_curve, measured_curve
                                                       -- a run's trees at other sizes, on other cost curves
    start, generate                                    -- a session and the loop over its steps
    StepRecord (STEP_KINDS: PREFILL, SPECULATIVE, AUTOREGRESSIVE; STOP_REASONS), RunResult, DraftTree, DraftPhase
    (PARALLEL: the MLP heads' phase), Verdict (SamplingTrace), Acceptance
    encode_prompt, decode_tokens, token_pieces         -- text at the edges
    GumihoError                                        -- every user-facing error
    first_difference                                   -- where two outputs part (gumiho_core.exactness)
    RunFile, StepFile (RUN_FILE_FORMAT, RUN_FILE_VERSION), json_containers, MAX_NEW_TOKENS, MAX_TREE_DEPTH, ...
                                                       -- the run file's schema, its limits and its JSON budget
    ROOT, SERIAL_STEP, MLP_HEAD, SERIAL_STEPS           -- the proposer vocabulary: "root", "serial<d>", "mlp<m>"
"""
import sys
import types

from .acceptance import Acceptance, expected_length, length_gains
from .config import (
    ARCHITECTURES,
    HYBRID,
    MAX_DEPTH,
    MAX_SEED,
    MAX_TREE_TOKENS,
    POOLS,
    SERIAL,
    TREE_FIELDS,
    TREE_MODES,
    DecodeConfig,
    DrafterConfig,
    TreeConfig,
)
from .methods import (AR, DRAFTING_METHODS, EAGLE, GUMIHO, GUMIHO_SERIAL, MEDUSA, METHODS, REGISTRY, Method,
                      check_method, drafters_for, method)
from .drafter import GumihoDrafter
from .drafting import DraftPhase
from .engine import generate, start
from .errors import GumihoError
from .exactness import first_difference
from .measure.autotree import REMEASURE_GAP, TreeChoice, cached_tree_choice, choose_tree, mark_stale, prediction_gap
from .measure.whatif import CostCurve, StepCosts, WhatIf, flat_curve, measured_curve, what_if
from .models import DEFAULT_TARGET_NAME, has_default_heads, load_drafter, load_target, resolve_device, untrained_drafter
from .records import (AUTOREGRESSIVE, FULL_PRECISION, HALF_PRECISION, PREFILL, RUN_FILE_FORMAT, RUN_FILE_VERSION,
                      SPECULATIVE, STEP_KINDS, STOP_REASONS, RunFile, RunResult, StepFile, StepRecord)
from .schema import (MAX_ANSWER_CHARS, MAX_COUNT, MAX_NAME_CHARS, MAX_NEW_TOKENS, MAX_NOTE_CHARS, MAX_NOTES,
                     MAX_PIECE_CHARS, MAX_PROMPT_CHARS, MAX_RECORDS, MAX_SECONDS, MAX_SPECIAL_IDS, MAX_TOKEN_ID,
                     MAX_TREE_DEPTH, MAX_TREE_NODES, MIN_LOGPROB, SERIAL_STEPS, json_containers)
from .target import Target
from .text import decode_tokens, encode_prompt, token_pieces
from .tree import MLP_HEAD, PARALLEL, ROOT, SERIAL_STEP, DraftTree
from .trees import (AUTO, CLASSROOM, CUSTOM, FASTEST, MEASURED, PAPER, PRESETS as TREE_PRESETS, SMALL, TREE_REQUESTS,
                    ResolvedTree, fallback as fallback_preset, preset_of, resolve_tree)
from .verify import SamplingTrace, Verdict

__all__ = [
    "TreeChoice", "cached_tree_choice", "choose_tree", "Acceptance", "DEFAULT_TARGET_NAME", "load_drafter",
    "load_target", "resolve_device", "untrained_drafter", "decode_tokens", "encode_prompt", "token_pieces",
    "AR", "GUMIHO", "EAGLE", "MEDUSA", "GUMIHO_SERIAL", "HYBRID", "SERIAL", "METHODS", "REGISTRY", "Method", "method",
    "DRAFTING_METHODS", "drafters_for", "ARCHITECTURES", "TREE_MODES", "TREE_FIELDS", "MAX_DEPTH", "MAX_TREE_TOKENS",
    "MAX_SEED",
    "check_method", "DecodeConfig", "TreeConfig", "DrafterConfig", "GumihoDrafter", "DraftPhase", "PARALLEL",
    "RunResult", "StepRecord", "STEP_KINDS", "STOP_REASONS", "PREFILL", "SPECULATIVE", "AUTOREGRESSIVE", "generate",
    "start", "GumihoError", "Target", "DraftTree", "Verdict", "first_difference",
    "SamplingTrace", "POOLS", "REMEASURE_GAP", "mark_stale", "prediction_gap", "what_if", "WhatIf", "CostCurve",
    "StepCosts", "flat_curve", "measured_curve", "RunFile", "StepFile", "RUN_FILE_FORMAT", "RUN_FILE_VERSION",
    "FULL_PRECISION", "HALF_PRECISION", "json_containers", "ROOT", "SERIAL_STEP", "MLP_HEAD", "SERIAL_STEPS",
    "MAX_ANSWER_CHARS", "MAX_COUNT", "MAX_NAME_CHARS", "MAX_NEW_TOKENS", "MAX_NOTE_CHARS", "MAX_NOTES",
    "MAX_PIECE_CHARS", "MAX_PROMPT_CHARS", "MAX_RECORDS", "MAX_SECONDS", "MAX_SPECIAL_IDS", "MAX_TOKEN_ID",
    "MAX_TREE_DEPTH", "MAX_TREE_NODES", "MIN_LOGPROB", "has_default_heads", "AUTO", "CLASSROOM", "CUSTOM", "FASTEST",
    "MEASURED", "PAPER", "SMALL", "TREE_PRESETS", "TREE_REQUESTS", "ResolvedTree", "fallback_preset", "preset_of",
    "resolve_tree", "expected_length", "length_gains",
]


class _Package(types.ModuleType):
    """Keeps `gumiho_core.generate` the engine's function: importing the CLI module gumiho_core/generate.py would
    otherwise bind that module over it (Python sets an imported submodule as an attribute of its package)."""

    def __setattr__(self, name, value):
        if name == "generate" and isinstance(value, types.ModuleType):
            return  # the module stays in sys.modules["gumiho_core.generate"]; only the package attribute is kept
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
