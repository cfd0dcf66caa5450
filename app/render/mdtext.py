"""Text from elsewhere inside Markdown or HTML: a run file's names shown as the very characters they hold, never as
markup; and the engine's sentences (a measured tree's summary) in the page's plain words.

html.escape() is not enough in Markdown: `[docs](https://evil.example)` and `![](https://evil.example/x.png)` hold
no HTML character, yet Markdown makes them a live link and a remote image.
"""
from __future__ import annotations

import re

# Every ASCII punctuation character (CommonMark lets each be backslash-escaped): no link, image, emphasis, code,
# HTML, entity, heading, list, table or math can start, and no URL or e-mail address is made a link.
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
# Line breaks (a new block), other control characters and the bidirectional overrides (text that reads
# differently from how it is stored): each becomes a space.
_LAYOUT = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_ONE_THREADS = re.compile(r"\b1 threads\b")


def md_text(text: str) -> str:
    """`text` as literal characters in a Markdown component, on one line."""
    return _PUNCTUATION.sub(r"\\\1", _LAYOUT.sub(" ", text))


def plain_words(text: str) -> str:
    """An engine sentence for the page: the CLI's `code` marks dropped (they would show as raw backticks) and
    "1 threads" made singular."""
    return _ONE_THREADS.sub("1 thread", text.replace("`", ""))
