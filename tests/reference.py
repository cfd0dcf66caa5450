"""A plain greedy loop written independently of the engine: full recompute, no cache, HF model only."""
from __future__ import annotations

import torch


@torch.inference_mode()
def plain_greedy(model, prompt, max_new_tokens, eos_ids=(), max_len=None) -> list[int]:
    seq = list(prompt)
    out = []
    while len(out) < max_new_tokens and (max_len is None or len(seq) < max_len):
        logits = model(input_ids=torch.tensor([seq], device=model.device)).logits[0, -1]
        tok = int(logits.argmax())
        seq.append(tok)
        out.append(tok)
        if tok in eos_ids:
            break
    return out
