"""gumiho_core: Gumiho speculative decoding, exposed step by step.

Public API (the app and the CLIs use only these names):
    load_target, load_drafter, untrained_drafter      -- models (default: SmolLM2-135M-Instruct, offline)
    TreeConfig, DecodeConfig, DrafterConfig            -- settings
    METHODS (GUMIHO, SERIAL, AR), TREE_MODES, TREE_FIELDS, MAX_DEPTH, MAX_TREE_TOKENS, MAX_SEED, check_method
                                                       -- the names and bounds every front end shares
    choose_tree, cached_tree_choice, TreeChoice        -- the auto tree: measured here (the MLP rule, and the fastest)
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
from .acceptance import Acceptance
from .config import (
    AR,
    GUMIHO,
    MAX_DEPTH,
    MAX_SEED,
    MAX_TREE_TOKENS,
    METHODS,
    POOLS,
    SERIAL,
    TREE_FIELDS,
    TREE_MODES,
    DecodeConfig,
    DrafterConfig,
    TreeConfig,
    check_method,
)
from .drafter import GumihoDrafter
from .drafting import DraftPhase
from .engine import generate, start
from .errors import GumihoError
from .exactness import first_difference
from .measure.autotree import REMEASURE_GAP, TreeChoice, cached_tree_choice, choose_tree, mark_stale, prediction_gap
from .measure.whatif import CostCurve, StepCosts, WhatIf, flat_curve, measured_curve, what_if
from .models import DEFAULT_TARGET_NAME, load_drafter, load_target, resolve_device, untrained_drafter
from .records import (AUTOREGRESSIVE, FULL_PRECISION, HALF_PRECISION, PREFILL, RUN_FILE_FORMAT, RUN_FILE_VERSION,
                      SPECULATIVE, STEP_KINDS, STOP_REASONS, RunFile, RunResult, StepFile, StepRecord)
from .schema import (MAX_ANSWER_CHARS, MAX_COUNT, MAX_NAME_CHARS, MAX_NEW_TOKENS, MAX_NOTE_CHARS, MAX_NOTES,
                     MAX_PIECE_CHARS, MAX_PROMPT_CHARS, MAX_RECORDS, MAX_SECONDS, MAX_SPECIAL_IDS, MAX_TOKEN_ID,
                     MAX_TREE_DEPTH, MAX_TREE_NODES, MIN_LOGPROB, SERIAL_STEPS, json_containers)
from .target import Target
from .text import decode_tokens, encode_prompt, token_pieces
from .tree import MLP_HEAD, PARALLEL, ROOT, SERIAL_STEP, DraftTree
from .verify import SamplingTrace, Verdict

__all__ = [
    "TreeChoice", "cached_tree_choice", "choose_tree", "Acceptance", "DEFAULT_TARGET_NAME", "load_drafter",
    "load_target", "resolve_device", "untrained_drafter", "decode_tokens", "encode_prompt", "token_pieces",
    "AR", "GUMIHO", "SERIAL", "METHODS", "TREE_MODES", "TREE_FIELDS", "MAX_DEPTH", "MAX_TREE_TOKENS", "MAX_SEED",
    "check_method", "DecodeConfig", "TreeConfig", "DrafterConfig", "GumihoDrafter", "DraftPhase", "PARALLEL",
    "RunResult", "StepRecord", "STEP_KINDS", "STOP_REASONS", "PREFILL", "SPECULATIVE", "AUTOREGRESSIVE", "generate",
    "start", "GumihoError", "Target", "DraftTree", "Verdict", "first_difference",
    "SamplingTrace", "POOLS", "REMEASURE_GAP", "mark_stale", "prediction_gap", "what_if", "WhatIf", "CostCurve",
    "StepCosts", "flat_curve", "measured_curve", "RunFile", "StepFile", "RUN_FILE_FORMAT", "RUN_FILE_VERSION",
    "FULL_PRECISION", "HALF_PRECISION", "json_containers", "ROOT", "SERIAL_STEP", "MLP_HEAD", "SERIAL_STEPS",
    "MAX_ANSWER_CHARS", "MAX_COUNT", "MAX_NAME_CHARS", "MAX_NEW_TOKENS", "MAX_NOTE_CHARS", "MAX_NOTES",
    "MAX_PIECE_CHARS", "MAX_PROMPT_CHARS", "MAX_RECORDS", "MAX_SECONDS", "MAX_SPECIAL_IDS", "MAX_TOKEN_ID",
    "MAX_TREE_DEPTH", "MAX_TREE_NODES", "MIN_LOGPROB",
]
