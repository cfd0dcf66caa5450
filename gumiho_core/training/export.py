"""Export heads trained here in the authors' published layout, for their code and vLLM's Gumiho method.

    python -m gumiho_core.train export --draft <our folder> --out <folder> [--target <target folder>]

writes into <folder>:
  pytorch_model.bin  the authors' keys and shapes (docs/method.md, "Checkpoint layout") and nothing else, since their loader is
                     strict; embed_tokens.weight is a copy of the target's embedding, read from the
                     target's weight files (the target model itself is never loaded)
  config.json        the draft's LLaMA config (2 layers) with the fields the authors' loader and vLLM read
  draft_vocab.json   only for heads with a reduced draft vocabulary: the target ids they propose from
  README.md          a model card

A reduced vocabulary has no place in the official layout: the authors' code and vLLM's Gumiho model
both apply the target's whole lm_head (neither reads a token map), and a linear lm_head row cannot be
made to lose always. There such heads propose from the whole vocabulary; output stays exact (the
target verifies every token), acceptance may differ. This project's loader reads draft_vocab.json and
so proposes exactly what the original heads propose.
"""
from __future__ import annotations

import json
import logging
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from ..drafter import (DRAFT_VOCAB_FILE, FORMAT, DrafterConfig, GumihoDrafter, SharedWeights, load_state,
                       write_draft_vocab)
from ..errors import GumihoError
from ..models import DEFAULT, ensure_default_model

log = logging.getLogger(__name__)

OFFICIAL_WEIGHTS = "pytorch_model.bin"
TARGET_EMBEDDING = "model.embed_tokens.weight"  # its key in a LLaMA-family HF checkpoint
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class Exported:
    folder: Path
    tensors: int
    weights_bytes: int  # size of pytorch_model.bin
    embedding_bytes: int  # of which the copy of the target's embedding
    draft_vocab: int | None  # tokens the heads propose from; None = the target's whole vocabulary


def read_ours(folder: Path) -> tuple[dict, DrafterConfig, dict[str, torch.Tensor]]:
    """(config.json, its drafter config, tensors) of heads in this project's format."""
    if not ((folder / "config.json").is_file() and (folder / "model.safetensors").is_file()):
        raise GumihoError(f"{folder}: not heads in this project's format (config.json + model.safetensors); "
                          "heads already in the authors' layout need no export")
    try:
        meta = json.loads((folder / "config.json").read_text())
        cfg = DrafterConfig(**meta["config"])
        state = load_file(str(folder / "model.safetensors"))
    except (ValueError, KeyError, TypeError, SafetensorError) as e:
        raise GumihoError(f"{folder}: unreadable heads ({type(e).__name__}: {e})") from None
    if meta.get("format") != FORMAT:
        raise GumihoError(f"{folder / 'config.json'}: format {meta.get('format')!r}, expected {FORMAT!r}")
    return meta, cfg, state


def check_layout(cfg: DrafterConfig, state: dict[str, torch.Tensor], src: Path) -> None:
    """The tensors are the drafter's, names and shapes (its own loader checks them), using no memory (meta device)."""
    with torch.device("meta"):
        empty = torch.empty(cfg.vocab_size, cfg.hidden_size)
        drafter = GumihoDrafter(cfg, SharedWeights(empty, empty))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a copy into a meta tensor is a no-op, which is the point
        load_state(drafter, state, str(src))


def target_folder(spec: str) -> Path:
    """The local folder of the target: its config.json and weight files are all an export reads."""
    if spec == DEFAULT:
        return ensure_default_model()
    folder = Path(spec).expanduser()
    if not (folder / "config.json").is_file():
        raise GumihoError(f"export reads the target's config.json and embedding from a local model folder; "
                          f"{spec!r} is not one (download the model first)")
    return folder


def _file_holding(folder: Path, key: str) -> Path:
    for index in WEIGHT_INDEXES:  # a sharded checkpoint names the shard of each tensor
        if (folder / index).is_file():
            shard = json.loads((folder / index).read_text()).get("weight_map", {}).get(key)
            if shard:
                return folder / shard
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    raise GumihoError(f"target folder {folder} has no {' or '.join(WEIGHT_FILES)} (nor an index of shards)")


def _read_tensor(file: Path, key: str) -> torch.Tensor | None:
    if file.suffix == ".safetensors":
        with safe_open(str(file), "pt") as f:
            return f.get_tensor(key) if key in f.keys() else None
    return torch.load(str(file), map_location="cpu", weights_only=True, mmap=True).get(key)


def target_embedding(folder: Path) -> torch.Tensor:
    """The target's input embedding [V, H], read from its weight files without building the model."""
    file = _file_holding(folder, TARGET_EMBEDDING)
    try:
        embed = _read_tensor(file, TARGET_EMBEDDING)
    except (OSError, RuntimeError, SafetensorError, pickle.UnpicklingError) as e:
        raise GumihoError(f"{file}: not a readable checkpoint ({type(e).__name__}: {e})") from None
    if embed is None:
        raise GumihoError(f"{file} holds no {TARGET_EMBEDDING}: not a LLaMA-family checkpoint")
    return embed


def rope_fields(rope: dict) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) as pre-v5 LLaMA configs write them, which the authors' config class reads.

    It knows only linear and dynamic scaling; other kinds are written for vLLM and transformers, with a warning.
    """
    kind = rope.get("rope_type", "default")
    if kind == "default":
        return float(rope["rope_theta"]), None
    if kind in ("linear", "dynamic"):
        return float(rope["rope_theta"]), {"type": kind, "factor": float(rope["factor"])}
    log.warning("RoPE scaling %r: the authors' code cannot load it (linear and dynamic only); vLLM can", kind)
    return float(rope["rope_theta"]), {k: v for k, v in rope.items() if k != "rope_theta"}


def official_config(cfg: DrafterConfig, target_cfg: dict, dtype: torch.dtype, draft_vocab: int | None) -> dict:
    """config.json: a 2-layer LLaMA config as the authors' gumiho/train/*.json are, and vLLM's fc flag.

    Field by field, who reads it: tests/test_export.py (AUTHORS_FIELDS, VLLM_FIELDS).
    """
    rope_theta, rope_scaling = rope_fields(cfg.rope_parameters)
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
        "hidden_act": cfg.hidden_act, "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings, "vocab_size": cfg.vocab_size,
        "rope_theta": rope_theta, "rope_scaling": rope_scaling, "pretraining_tp": 1,
        "qkv_bias": cfg.attention_bias, "attention_bias": cfg.attention_bias, "mlp_bias": False,
        "tie_word_embeddings": False, "torch_dtype": str(dtype).removeprefix("torch."),
        **{k: target_cfg.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
        # The authors' loader reads "bias" but builds fc with a bias whatever it says; vLLM's LLaMA layers
        # read it as the attention projections' bias, which these heads do not have: so false.
        "bias": False,
        "gumiho_fc_bias": True,  # vLLM's Gumiho model builds fc without a bias, dropping fc.bias, unless set
        "gumiho_export": {"serial_steps": cfg.serial_steps, "mlp_heads": cfg.mlp_heads, "res_blocks": cfg.res_blocks,
                   "draft_vocab_size": draft_vocab or cfg.vocab_size, "exported_by": FORMAT},
    }


def _check_out(out: Path, src: Path) -> None:
    if out.resolve() == src.resolve():
        raise GumihoError(f"--out {out} is the heads' own folder: export into a folder of its own")
    clashes = sorted(p.name for p in out.glob("*.safetensors")) if out.is_dir() else []
    if clashes:  # vLLM loads *.safetensors in preference to pytorch_model.bin, and so would this project
        raise GumihoError(f"--out {out} already holds {', '.join(clashes)}: export into a folder of its own")


def _check_fits(cfg: DrafterConfig, embed: torch.Tensor, src: Path, target: Path) -> None:
    if tuple(embed.shape) != (cfg.vocab_size, cfg.hidden_size):
        raise GumihoError(f"{src} has hidden size {cfg.hidden_size} and vocabulary {cfg.vocab_size}; the target in "
                          f"{target} has an embedding of shape {tuple(embed.shape)}: the heads belong to another model")
    if cfg.head_dim * cfg.num_attention_heads != cfg.hidden_size:
        log.warning("head_dim %d x %d heads != hidden size %d: the authors' code derives head_dim from the hidden "
                    "size and cannot load these heads; vLLM reads head_dim", cfg.head_dim,
                    cfg.num_attention_heads, cfg.hidden_size)


def export_official(draft: str | Path, target: str, out: str | Path) -> Exported:
    """Write heads in this project's format (folder `draft`) into `out` in the authors' published layout."""
    src, out = Path(draft).expanduser(), Path(out).expanduser()
    meta, cfg, ours = read_ours(src)
    check_layout(cfg, ours, src)
    folder = target_folder(target)
    embed = target_embedding(folder)
    _check_fits(cfg, embed, src, folder)
    _check_out(out, src)
    vocab_map = ours.pop("draft_vocab", None)
    dtype = ours["fc.weight"].dtype
    state = {**ours, "embed_tokens.weight": embed.to(dtype).contiguous()}
    out.mkdir(parents=True, exist_ok=True)
    torch.save(state, out / OFFICIAL_WEIGHTS)
    (out / DRAFT_VOCAB_FILE).unlink(missing_ok=True)  # one left by an earlier export would restrict these heads
    if vocab_map is not None:
        write_draft_vocab(out / DRAFT_VOCAB_FILE, vocab_map, cfg.vocab_size)
    draft_vocab = None if vocab_map is None else len(vocab_map)
    target_cfg = json.loads((folder / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(official_config(cfg, target_cfg, dtype, draft_vocab), indent=2))
    result = Exported(out, len(state), (out / OFFICIAL_WEIGHTS).stat().st_size,
                      embed.numel() * state["embed_tokens.weight"].element_size(), draft_vocab)
    (out / "README.md").write_text(model_card(meta, cfg, src, folder, result))
    return result


def model_card(meta: dict, cfg: DrafterConfig, src: Path, target: Path, result: Exported) -> str:
    """README.md of the exported folder: what it holds and how each engine loads it."""
    mb = 1 / 2**20
    steps = cfg.serial_steps + cfg.mlp_heads
    lines = [
        f"# Gumiho heads for {meta.get('target') or target.name}, in the authors' published layout", "",
        f"Exported by `python -m gumiho_core.train export` from `{src}` (the Gumiho visualiser's own format). "
        "Architecture: 2 serial LLaMA layers + "
        f"{cfg.mlp_heads} parallel MLP heads; the target's embedding and lm_head are shared.", "",
        "| file | holds |", "|---|---|",
        f"| `pytorch_model.bin` | {result.tensors} tensors in the authors' key names and shapes, "
        f"{result.weights_bytes * mb:.1f} MB; {result.embedding_bytes * mb:.1f} MB of it is `embed_tokens.weight`, "
        "a copy of the target's embedding that the authors' loader requires |",
        "| `config.json` | the draft's 2-layer LLaMA config, with the fields the authors' loader and vLLM read |",
    ]
    if result.draft_vocab:
        lines.append(f"| `{DRAFT_VOCAB_FILE}` | the {result.draft_vocab} of {cfg.vocab_size} target token ids the "
                     "heads were trained to propose from |")
    lines += ["", "## Loading", "",
              f"- The Gumiho visualiser: `python app.py --target {target} --draft <this folder>`.",
              f"- vLLM with the Gumiho method (pull request #43544, open; one GPU): `vllm serve {target} "
              f"--speculative-config '{{\"method\": \"gumiho\", \"model\": \"<this folder>\", "
              f"\"num_speculative_tokens\": {steps}}}'` (chain drafting: 2 serial tokens, then one per MLP head).",
              "- The authors' code (github.com/AMD-AIG-AIMA/Gumiho): `--gumiho-model-path <this folder> --mlp_num "
              f"{cfg.mlp_heads}`; their loader takes the architecture from a JSON file chosen by `--model_name`, so "
              "point that choice at this `config.json`. It accepts LLaMA targets only.", ""]
    if result.draft_vocab:
        lines += ["## Reduced draft vocabulary", "",
                  f"These heads were trained to propose from {result.draft_vocab} tokens. Only the Gumiho visualiser "
                  f"reads `{DRAFT_VOCAB_FILE}` and proposes exactly what the heads were trained for; the authors' "
                  "code and vLLM apply the target's whole lm_head, so there the heads may also propose other "
                  "tokens. The output is exact in every engine (the target verifies each token); only acceptance "
                  "can differ.", ""]
    return "\n".join(lines)
