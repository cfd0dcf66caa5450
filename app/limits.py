"""What untrusted input may hold: the limits on a run file (uploaded by anyone) and the test of valid text
that run files, the Run form and the API share. Every refusal names the limit it hit.

The limits of each field are declared once, in the run file's schema (gumiho_core.RunFile); what is set here
is what parsing a file may cost before any field is read, and the budget of lists and objects is counted from
the schema's declared limits.
"""
from __future__ import annotations

import re

from gumiho_core import RunFile, json_containers

# -- the file as JSON: checked on the text, before it is parsed ----------------------------------------------
MAX_BYTES = 5 * 1024 * 1024
LOADS_AT_ONCE = 2  # uploads checked at the same time (each costs under 2 s and 100 MB): others queue
MAX_JSON_NESTING = 8  # the app writes 6 levels: run > records > step > phases > phase > depths
# Every value and container the parser would build, bounded so that parsing 5 MB costs tens of MB at most:
# a run file the app writes spends about 6.5 bytes on each (measured on the tiny test model's run, whose token
# ids have two digits; a real vocabulary's have five), so a 5 MB one holds about 800,000.
MAX_JSON_ITEMS = 1_000_000
MAX_JSON_STRINGS = 300_000  # one per tree node (its proposer) and two per token text; the keys are shared
# The most lists and objects a valid file can hold (80,984: 1,025 steps of 78 at most, the baseline's 1,024
# pairs, the run's own 10), and the 6 the budget counted by hand before the schema had to spare.
MAX_JSON_CONTAINERS = json_containers(RunFile) + 6  # a race's file (runschema.py) spends it on all its lanes together

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text` (such a string is not valid UTF-8 and cannot be sent
    to the browser), or None."""
    found = _LONE_SURROGATE.search(text)
    return None if found is None else found.start()
