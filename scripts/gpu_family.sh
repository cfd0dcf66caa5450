#!/usr/bin/env bash
# The comparison drafters of issue #50 on a lent GPU, in calls of at most 10 minutes (docs/training.md, "The
# comparison drafters"; docs/deploy.md, "A lease, call by call", for the calls that bring the model over first).
#
#     OUT=$OUT bash scripts/gpu_family.sh SECONDS [train options...]
#
# One call: make the features if this machine lacks them; then train gumiho, eagle and medusa side by side, one
# process each (`python -m gumiho_core.train family --architectures <member> --run family`), each with the same
# options and schedule and the learning rate and batch the sweep chose (data/family/tune.json, copied into the work
# folder; family trains at the batch the sweep ran at), keeping the heads every KEEP_EVERY steps (default 500) for the
# step curve; stop them SECONDS after the call began
# (SIGTERM: each stops after the step it is in, with a checkpoint), so the same command on the warm machine resumes.
# Once all three have finished, each run's kept heads are evaluated (`train family-steps`: EVAL_N held-out prompts,
# default 8, EVAL_TOKENS new tokens, default 96, the authors' tree, T=0) with the time left.
# What comes home (at most 8 files, 64 MiB): family.tar.0, .1, ... (15 MB pieces: the three members' last heads,
# histories, step curves and kept heads' evaluations, not the kept weights) and logs.tgz. At home:
# `cat family.tar.* | tar x -C ~/.cache/gumiho/train/default`.
#
# Environment: OUT (required), STEPS (default 4000), KEEP_EVERY, EVAL_N, EVAL_TOKENS, MEMBERS (default
# "gumiho eagle medusa"), GUMIHO_TRAIN_DEVICE (default cuda; cpu for a smoke test), PYTHON (default python3).
set -u
SECONDS_MAX=${1:?usage: gpu_family.sh SECONDS [train options]}
shift
: "${OUT:?set OUT to the folder results go to}"
PY=${PYTHON:-python3}
DEV=${GUMIHO_TRAIN_DEVICE:-cuda}
STEPS=${STEPS:-4000}
KEEP_EVERY=${KEEP_EVERY:-500}
MEMBERS=${MEMBERS:-gumiho eagle medusa}
WORK=$($PY -c "from gumiho_core.models import cache_dir; print(cache_dir() / 'train' / 'default')")
LOGS="$WORK/family.logs"
TAIL=25  # seconds kept after the runs: each stops after the step it is in (up to 15 s), then the packing
mkdir -p "$LOGS"
left() { echo $((SECONDS_MAX - SECONDS)); }
KEEP=$(seq -s, "$KEEP_EVERY" "$KEEP_EVERY" "$STEPS")

snap() {
    tar czf "$OUT/.logs.tgz" -C "$LOGS" . 2>/dev/null && mv "$OUT/.logs.tgz" "$OUT/logs.tgz"
    local have=()
    for m in $MEMBERS; do
        for f in drafter/config.json drafter/model.safetensors drafter/evaluation.json history.json data.json steps.json \
                 steps.png evaluation.json; do
            [ -f "$WORK/family-$m/$f" ] && have+=("family-$m/$f")
        done
        for f in "$WORK"/family-"$m"/drafter-step*/config.json "$WORK"/family-"$m"/drafter-step*/evaluation.json; do
            [ -f "$f" ] && have+=("${f#"$WORK"/}")
        done
    done
    for f in family-steps.json family-steps.png tune.json; do [ -f "$WORK/$f" ] && have+=("$f"); done
    [ ${#have[@]} -gt 0 ] || return 0
    tar cf "$OUT/.family.tar" -C "$WORK" "${have[@]}" 2>/dev/null || { rm -f "$OUT/.family.tar"; return 0; }
    rm -f "$OUT"/family.tar.*
    split -b 15000000 -d -a 1 "$OUT/.family.tar" "$OUT/family.tar."
    rm -f "$OUT/.family.tar"
}

cp data/family/tune.json "$WORK/tune.json" 2>/dev/null || echo "no data/family/tune.json: every member takes --lr"
$PY -m gumiho_core.train extract-features --device "$DEV" --data-dtype float32 "$@" >> "$LOGS/extract.log" 2>&1 \
    || { echo "extract-features failed: see extract.log"; snap; exit 1; }
( while sleep 30; do snap; done ) &
LOOP=$!
pids=()
for m in $MEMBERS; do
    timeout -k 15 "$(( $(left) - TAIL ))" $PY -m gumiho_core.train family --device "$DEV" --architectures "$m" \
        --run family --steps "$STEPS" --keep-steps "$KEEP" --checkpoint-minutes 1 "$@" >> "$LOGS/train-$m.log" 2>&1 &
    pids+=($!)
done
codes=""
for p in "${pids[@]}"; do wait "$p"; codes="$codes $?"; done
kill $LOOP 2>/dev/null
snap
echo "trainers exited:$codes after $SECONDS s (124: stopped by the time limit; call again to resume)"
case "$codes" in *[1-9]*) exit 1 ;; esac
members=$(echo "$MEMBERS" | tr ' ' ',')
timeout "$(( $(left) - 10 ))" $PY -m gumiho_core.train family-steps --device "$DEV" --architectures "$members" \
    --run family --eval-n "${EVAL_N:-8}" --eval-tokens "${EVAL_TOKENS:-96}" "$@" >> "$LOGS/steps.log" 2>&1
echo "family-steps exited $? after $SECONDS s"
snap
