"""Reading drafter weights as stored: our folders, the authors' layout (a .bin or .safetensors file, a folder
holding one), a hub id where a hub is reachable. Nothing here builds a model: models.load_drafter does."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .config import DrafterConfig
from .drafter import DRAFT_VOCAB_FILE, read_draft_vocab
from .errors import GumihoError
from .target import Target


def read_heads(spec: str, target: Target) -> tuple[DrafterConfig, dict[str, torch.Tensor], str]:
    """The config, the weights in their stored dtype, and the source of the heads at a path or hub id."""
    path = Path(spec).expanduser()
    if not path.exists():
        if looks_like_path(spec):
            raise GumihoError(f"drafter path {spec!r} does not exist")
        path = _download_official(spec)
    return (*_read_path(path, target), str(path))


def trained_steps(source: str) -> int | None:
    """The optimizer steps our heads at `source` were trained for since random weights (their config.json's
    "steps_from_scratch", or "steps" for a run that began from random weights), or None where the heads do not
    say (the authors' layout, a hub id, a run that went on from heads of unknown training)."""
    path = Path(source) / "config.json"
    try:
        meta = json.loads(path.read_text()) if path.is_file() else {}
        began_fresh = not (meta.get("train_config") or {}).get("init_from")
        steps = meta.get("steps_from_scratch", meta.get("steps") if began_fresh else None)
    except (OSError, ValueError, AttributeError):
        return None
    return steps if type(steps) is int and steps >= 0 else None


def looks_like_path(spec: str) -> bool:
    """Hub ids are owner/name; anything else with a slash, or a leading . ~ /, is meant as a path (targets too)."""
    return spec.startswith((".", "~", "/")) or spec.count("/") != 1 or spec.endswith((".bin", ".safetensors"))


def _read_path(path: Path, target: Target) -> tuple[DrafterConfig, dict]:
    if path.is_dir():
        if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
            try:
                meta = json.loads((path / "config.json").read_text())
                cfg = DrafterConfig(**meta["config"])
            except (ValueError, KeyError, TypeError) as e:
                raise GumihoError(f"{path / 'config.json'}: not a gumiho_core drafter config ({e})") from None
            return cfg, _safetensors_state(path / "model.safetensors")
        for name in ("pytorch_model.bin", "model.safetensors"):
            if (path / name).is_file():
                return _read_path(path / name, target)
        raise GumihoError(f"drafter folder {path} has neither config.json + model.safetensors (ours) "
                          "nor pytorch_model.bin (official layout)")
    state = _safetensors_state(path) if path.suffix == ".safetensors" else _torch_state(path)
    vocab_file = path.parent / DRAFT_VOCAB_FILE  # heads with a reduced vocabulary, exported (training/export.py)
    if vocab_file.is_file() and "draft_vocab" not in state:
        state["draft_vocab"] = read_draft_vocab(vocab_file, target.vocab_size)
    heads = {int(k.split(".")[1]) for k in state if k.startswith("mlp.") and k.split(".")[1].isdigit()}
    return DrafterConfig.from_target(target.config, mlp_heads=len(heads)), state


def _safetensors_state(path: Path) -> dict:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise GumihoError(f"{path}: not a readable safetensors file ({e})") from None


def _torch_state(path: Path) -> dict:
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for a bad pickle; all mean the same to a user
        raise GumihoError(f"{path}: not a readable PyTorch checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict):
        raise GumihoError(f"{path}: holds a {type(state).__name__}, not a state dict")
    return state


def _download_official(repo_id: str) -> Path:
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id, "pytorch_model.bin"))
    except Exception as e:  # offline, unknown id, gated: the user needs the same advice
        raise GumihoError(f"drafter {repo_id!r} is neither a local path nor reachable on the hub "
                          f"({type(e).__name__}); give a local folder or check the name and network") from None
