"""What a visitor may see of an error: the engine's own message with server paths cut down to their last
part, or one generic line. Never a traceback; those go to the server log."""
from __future__ import annotations

import logging
import re

from gumiho_core import GumihoError

log = logging.getLogger(__name__)

# An absolute or home-relative path (not a URL, not the "a/b" of a hub id): everything up to its last part.
_PATH = re.compile(r"(?<![\w.:/~…-])(?:~|/)(?:[^\s'\"(),;:<>]*/)*([^\s'\"(),;:<>/]*)")


def scrub(text: str) -> str:
    """`text` with every server path shortened to its last part: /root/.cache/x/model.bin -> …/model.bin."""
    return _PATH.sub(lambda m: "…/" + m.group(1), text)


def public_message(error: BaseException) -> str:
    """The message to show for `error`: a GumihoError's own words (paths scrubbed), else a generic line."""
    if isinstance(error, GumihoError):
        return scrub(str(error))
    return (f"something went wrong on the server ({type(error).__name__}); the details are in its log. "
            "Try again, perhaps with a shorter prompt or fewer new tokens.")


def report(error: BaseException, context: str) -> str:
    """Log `error` (a traceback for anything that is not a GumihoError) and return what the visitor sees."""
    if isinstance(error, GumihoError):
        log.warning("%s: %s", context, error)
    else:
        log.error("%s", context, exc_info=error)
    return public_message(error)
