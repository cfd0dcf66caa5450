"""Build a tiny Gumiho pair in the published layout, to try a deployment without a hub or a GPU.

    python scripts/make_demo_checkpoint.py out/demo
    python app.py --target out/demo/target --draft out/demo/draft/pytorch_model.bin
    python -m gumiho_core.generate --target out/demo/target --draft out/demo/draft --method gumiho --json --prompt Hi

out/demo/target  a random 2-layer LLaMA saved with save_pretrained (config.json, model.safetensors) and the
                 default model's tokenizer, so its vocabulary matches that tokenizer: a local folder read
                 exactly as a downloaded lmsys/vicuna-7b-v1.3 would be.
out/demo/draft   pytorch_model.bin in the authors' layout (keys and shapes as docs/method.md, "Checkpoint layout", lists them,
                 embed_tokens.weight included), as the amd/Gumiho-* repositories publish it.
The weights are random: the text is gibberish and the drafter rarely guesses right (the output is still
exactly the target's), but every file goes through the loaders a published checkpoint goes through.
The tests and scripts/gpu_check.py build their tiny published-layout pairs with `write_pair` (with a stand-in
`word_tokenizer` where the default model is absent).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # gumiho_core sits beside scripts/
from gumiho_core import GumihoError, load_target, untrained_drafter  # noqa: E402


def default_tokenizer():
    """The default model's tokenizer, or None (with the reason on stderr) when it is not installed."""
    try:
        return load_target("default", device="cpu").tokenizer
    except GumihoError as e:
        print(f"no tokenizer: {e}\nThe target folder is written without one; the app and the CLI need one to "
              "read prompts, so install the default model first (./setup.sh).", file=sys.stderr)
        return None


def tiny_llama(vocab: int, tokenizer, hidden: int, layers: int) -> LlamaForCausalLM:
    """A random LLaMA whose shapes follow the real ones: 4 heads of hidden/4, grouped-query attention."""
    eos = None if tokenizer is None else tokenizer.eos_token_id
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-5,
                      eos_token_id=eos, bos_token_id=None if tokenizer is None else tokenizer.bos_token_id,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def word_tokenizer(vocab: int):
    """A stand-in tokenizer: `vocab` words "w0", "w1", ... split on spaces (for machines without the default model)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0")


def official_state(target_dir: Path, heads_std: float | None = None) -> dict[str, torch.Tensor]:
    """A drafter for the saved target, keyed as the authors' pytorch_model.bin: untrained (MLP heads zero), or with
    every weight but the norms drawn from N(0, heads_std), so that every head proposes something of its own."""
    target = load_target(str(target_dir), device="cpu")
    drafter = untrained_drafter(target).float()
    if heads_std is not None:
        with torch.no_grad():
            for name, p in drafter.named_parameters():
                if "norm" not in name:
                    p.normal_(0.0, heads_std)
    state = dict(drafter.state_dict())
    state["embed_tokens.weight"] = target.shared_weights().embed  # the official files carry a copy of it
    return {k: v.detach().clone().contiguous() for k, v in state.items()}


def write_pair(out: Path, tokenizer, hidden: int = 64, layers: int = 2, seed: int = 0, sharpen: float = 1.0,
               heads_std: float | None = None) -> tuple[Path, Path]:
    """Write out/target (save_pretrained, with `tokenizer`) and out/draft/pytorch_model.bin; returns both paths.

    sharpen scales the target's lm_head: sharper distributions, more repetitive text, more accepted drafts.
    """
    target_dir, draft_file = out / "target", out / "draft" / "pytorch_model.bin"
    torch.manual_seed(seed)
    model = tiny_llama(len(tokenizer), tokenizer, hidden, layers)
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    model.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)
    draft_file.parent.mkdir(parents=True, exist_ok=True)
    torch.save(official_state(target_dir, heads_std), draft_file)
    return target_dir, draft_file


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default="out/demo", help="folder to write target/ and draft/ into")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=49152, help="used only without a tokenizer (else its size)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    hf_logging.disable_progress_bar()
    out = Path(args.out)
    tokenizer = default_tokenizer()
    if tokenizer is None:
        torch.manual_seed(args.seed)
        tiny_llama(args.vocab, None, args.hidden, args.layers).save_pretrained(out / "target")
        print(f"wrote {out / 'target'} (no tokenizer)")
        return 1
    target_dir, draft_file = write_pair(out, tokenizer, args.hidden, args.layers, args.seed)
    tensors = len(torch.load(draft_file, map_location="cpu", weights_only=True))
    print(f"wrote {target_dir} (vocabulary {len(tokenizer)}, hidden {args.hidden}, {args.layers} layers) and "
          f"{draft_file} ({tensors} tensors, official layout)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
