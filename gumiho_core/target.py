"""The target adapter: an unmodified Hugging Face causal LM seen as tokens in, (features, logits) out.

Tree verification passes a custom 4D mask and explicit position ids to the model's own forward.
The modeling code is transformers' own; on a CPU the linear layers of an fp32 model get packed oneDNN
weights (cpu_kernels.py: same results to fp32 rounding, verification of a small tree costs about one
token instead of 1.6x). Features are the last layer's post-norm hidden states (what lm_head reads).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from .attention import attention_kernels
from .cpu_kernels import pack_linears
from .errors import GumihoError
from .tree import DraftTree

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end_of_turn|>", "<|endoftext|>", "</s>")


@dataclass(frozen=True, eq=False)
class SharedWeights:
    """What the target lends its drafter: the frozen token embedding [V, H] and lm_head [V', H]
    (V' < V with a reduced draft vocabulary)."""

    embed: torch.Tensor
    lm_head: torch.Tensor
    vocab_map: torch.Tensor | None = None  # [V'] target ids of the lm_head rows, None = identity


def _as_set(x) -> set[int]:
    if x is None:
        return set()
    return {int(i) for i in x} if isinstance(x, (list, tuple, set)) else {int(x)}


class Target:
    def __init__(self, model, tokenizer=None, name: str = "custom"):
        cfg = model.config
        if cfg.model_type not in SUPPORTED_ARCHITECTURES:
            raise GumihoError(f"unsupported architecture {cfg.model_type!r}: supported are "
                              f"{', '.join(SUPPORTED_ARCHITECTURES)} (LLaMA-family decoders)")
        if getattr(cfg, "final_logit_softcapping", None):
            raise GumihoError(f"model {name!r} caps its logits, which tree verification does not reproduce")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.config = cfg
        self.base = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        self.max_len = int(cfg.max_position_embeddings)
        self.eos_ids = frozenset(self._eos_ids())
        self.packed_linears = pack_linears(model)

    def _eos_ids(self) -> set[int]:
        ids = _as_set(getattr(self.model.generation_config, "eos_token_id", None)) | _as_set(self.config.eos_token_id)
        tok = self.tokenizer
        if tok is not None:
            ids |= _as_set(tok.eos_token_id)
            vocab = tok.get_vocab()
            ids |= {vocab[t] for t in END_OF_TURN_TOKENS if t in vocab and t in tok.all_special_tokens}
        return ids

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def vocab_size(self) -> int:
        return self.lm_head.weight.shape[0]

    def shared_weights(self) -> SharedWeights:
        return SharedWeights(embed=self.base.embed_tokens.weight.detach(), lm_head=self.lm_head.weight.detach())

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.config)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                cache: DynamicCache) -> torch.Tensor:
        """tokens/positions [T] -> features [T, H]; appends T entries to `cache`.

        mask: [1, 1, T, S] additive, or None for causal attention.
        """
        with attention_kernels(tokens.device):
            out = self.base(input_ids=tokens[None], position_ids=positions[None], attention_mask=mask,
                            cache=cache, use_cache=True)
        return out.last_hidden_state[0]

    def forward_batch(self, ids: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor, cache) -> torch.Tensor:
        """Rows of tokens at once: ids/positions [B, T], allowed [B, 1, T, S] bool -> features [B, T, H].

        `cache`: None, or any object with the `update` of HF attention layers (training data uses a SlotCache).
        """
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=allowed.device)
        mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        with attention_kernels(ids.device):
            out = self.base(input_ids=ids, position_ids=positions, attention_mask=mask, cache=cache,
                            use_cache=cache is not None)
        return out.last_hidden_state

    def forward_tree(self, tree: DraftTree, cache: DynamicCache) -> torch.Tensor:
        """Features [n, H] of a draft tree's nodes after the cached context, in one forward (verification): each
        node sees the context and its own ancestors, at position context + depth. Appends n entries to `cache`."""
        past, dev = cache.get_seq_length(), self.device
        mask = tree.attention_mask(past, self.dtype, dev)
        return self.forward(torch.tensor(tree.tokens, device=dev), tree.position_ids(past, dev)[0], mask, cache)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.lm_head(features).float()  # [T, V]
