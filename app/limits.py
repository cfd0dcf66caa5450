"""What untrusted input may hold: the limits on a run file (uploaded by anyone) and the test of valid text
that run files, the Run form and the API share. Every refusal names the limit it hit.

Each limit is set from what the app itself writes, with headroom: the `paper` tree has 64 nodes and depth 7,
a run has at most MAX_NEW_TOKENS new tokens, and the longest token of SmolLM2's vocabulary is 81 characters.
"""
from __future__ import annotations

import re

from gumiho_core import MAX_TREE_TOKENS

MAX_NEW_TOKENS = 1024  # the app's own bounds on a run (the Run form's): a run is watched, step by step
MAX_TREE_DEPTH = 32  # the paper tree's depth is 7; deeper serial drafting is accepted too rarely to pay

# -- the file as JSON: checked on the text, before it is parsed ----------------------------------------------
MAX_BYTES = 5 * 1024 * 1024
LOADS_AT_ONCE = 2  # uploads checked at the same time (each costs under 2 s and 100 MB): others queue
MAX_JSON_NESTING = 8  # the app writes 6 levels: run > records > step > phases > phase > depths
# Every value and container the parser would build, bounded so that parsing 5 MB costs tens of MB at most:
# a run file the app writes spends about 6.5 bytes on each (measured on the tiny test model's run, whose token
# ids have two digits; a real vocabulary's have five), so a 5 MB one holds about 800,000.
MAX_JSON_ITEMS = 1_000_000
MAX_JSON_STRINGS = 300_000  # one per tree node (its proposer) and two per token text; the keys are shared
_PHASE_CONTAINERS = 2 * MAX_TREE_DEPTH  # a phase and its depths, at most one phase per depth
MAX_JSON_CONTAINERS = (MAX_NEW_TOKENS + 1) * (14 + _PHASE_CONTAINERS) + MAX_NEW_TOKENS + 16  # steps, baseline

# -- the run ---------------------------------------------------------------------------------------------------
MAX_RECORDS = MAX_NEW_TOKENS + 1  # every step commits at least one token; the prefill is step 0
MAX_TREE_NODES = MAX_TREE_TOKENS  # what the tree fields allow (the paper tree: 64)
# Tokens committed per step: the accepted path (at most the tree's depth) and the bonus.
MAX_TOKEN_ID = 10**7 - 1  # vocabularies have a few hundred thousand tokens (all nines: see runcheck's keys)
MAX_COUNT = 2**31 - 1  # whole numbers without a tighter bound (prompt tokens, candidates, top_k): 32 bits
MAX_SECONDS = 1e6  # a step or a run's compute time (11 days)
MIN_LOGPROB = -1e6  # a drafter log-probability or path score (0 at most: probabilities are <= 1)
MAX_SPECIAL_IDS = 2**16

# -- text -------------------------------------------------------------------------------------------------------
MAX_PIECE_CHARS = 1024  # one token's text (SmolLM2's longest: 81)
MAX_ANSWER_CHARS = 100_000  # the answer: `text`, and the texts of the committed tokens together
MAX_PROMPT_CHARS = 200_000  # 2,048 prompt tokens by default (--max-prompt-tokens), a few characters each
MAX_NAME_CHARS = 200  # target, device, preset, the time it was saved
MAX_NOTE_CHARS = 2_000  # a note, or where the tree came from (the auto tree's summary: ~400)
MAX_NOTES = 32

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text` (such a string is not valid UTF-8 and cannot be sent
    to the browser), or None."""
    found = _LONE_SURROGATE.search(text)
    return None if found is None else found.start()
