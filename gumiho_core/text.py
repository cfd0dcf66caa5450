"""Text at the edges: the engine speaks token ids; these turn a user's text into a prompt and back."""
from __future__ import annotations

from .errors import GumihoError


def encode_prompt(tokenizer, text: str, raw: bool = False, system: str | None = None) -> list[int]:
    """Token ids for a user message, under the model's chat template unless `raw` (or the model has none)."""
    if not isinstance(text, str) or not text.strip():
        raise GumihoError("the prompt is empty: type something for the model to answer")
    if not raw and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])


def decode_tokens(tokenizer, ids, skip_special: bool = True) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=skip_special)


def token_pieces(tokenizer, ids) -> list[str]:
    """The text of each token on its own (for colouring output and labelling tree nodes)."""
    return [tokenizer.decode([int(i)], skip_special_tokens=False) for i in ids]
