#!/usr/bin/env bash
# The long training run on a lent GPU, in calls of at most 10 minutes, so that a lease cut short still brings
# heads home (docs/training.md; docs/deploy.md, "A lease, call by call").
#
#     bash scripts/gpu_train.sh RUN SECONDS [train options...]
#
# One call: extract the features if this machine lacks them, then train run RUN (`python -m gumiho_core.train
# train --run RUN [train options]`) until SECONDS have passed since the call began, checkpointing every minute.
# A later call on the same warm machine resumes the run exactly where it stopped (same options). Every 30 s,
# and at the end, the run's current heads, history and data record are packed into $OUT as heads.tar.0, .1, ...
# (15 MB pieces: a device call returns files of at most 16 MiB; `cat heads.tar.* | tar x` joins them). When the
# run has finished, the heads it started from (--init-from), kept (--keep-steps) and ended with are evaluated side
# by side (EVAL_N held-out prompts, default 8, EVAL_TOKENS new tokens, default 96, the authors' tree, T=0) with the
# time left, each where `train steps` looks for it; $OUT/steps.tar brings the kept heads' config.json and the
# evaluations home (not the kept weights): unpacked into the run's folder, `train steps` draws the step curve from
# them; where kept heads beat the last ones, best.tar.0, .1, ... brings those too. The logs (extract, probe, the
# training profile, train, each evaluation, the schedule) go to $OUT/logs.tgz, packed with the heads: a device
# call brings back at most 8 files, and this one writes at most 8 (the last heads' 3 pieces, the best kept heads'
# 3, steps.tar, logs.tgz).
#
# STEPS=auto sizes the schedule to the call: before the run starts, a probe of PROBE_STEPS (default 60) steps with
# the same options times a step and the run's start, and the run gets --steps to end EVAL_S seconds (default 30)
# before SECONDS, which the evaluations after the run use (the schedule is written to the logs' `steps` and kept
# beside the run, so that a resuming call keeps it).
# STEPS_MAX=N caps it: N steps when they fit, fewer when they do not.
# BUDGET_S=N lets the schedule span calls: it is sized to N seconds counted from this call's start (default SECONDS,
# this call alone), less one run start (the probe's) for each further call of SECONDS; give the same command again
# in the next calls until the run is done (a lease's two work calls hold about 700 s of its 15 minutes).
#
# PROFILE_STEPS=N (default 0: none): once the features are there, and once per run, scripts/measure_train_speed.py
# times N optimizer steps of the trainer (bf16, as drafted) in micro-batches of 8192 padded tokens (what `train`
# takes on a GPU: one a step) and profiles N more into train-profile.txt (in logs.tgz): the ops that took the most
# GPU time and the most host time (where a step's time goes); then N steps in micro-batches of 4096 (two a step,
# as on a CPU), for comparison; then the timed steps' JSON lines.
#
# Environment: OUT (required: where results go), GUMIHO_CACHE (the cache the run lives in),
# GUMIHO_TRAIN_DEVICE (default cuda; cpu for a smoke test), PYTHON (default python3), STEPS, STEPS_MAX, BUDGET_S,
# PROBE_STEPS, PROFILE_STEPS, CORPUS (the profile's corpus; default the repository's), EVAL_N, EVAL_TOKENS, EVAL_S.
set -u
RUN=${1:?usage: gpu_train.sh RUN SECONDS [train options]}
SECONDS_MAX=${2:?usage: gpu_train.sh RUN SECONDS [train options]}
shift 2
: "${OUT:?set OUT to the folder results go to}"
PY=${PYTHON:-python3}
DEV=${GUMIHO_TRAIN_DEVICE:-cuda}
WORK=$($PY -c "from gumiho_core.models import cache_dir; print(cache_dir() / 'train' / 'default')")
R="$WORK/$RUN"
LOGS="$R.logs"
mkdir -p "$LOGS"
left() { echo $((SECONDS_MAX - SECONDS)); }
TAIL=25  # seconds a call keeps after the run: its stop after the step it is in (up to 15 s), then the packing
HANDOVER=$((TAIL + 10))  # what handing a run to the next call costs: this call's tail, the next one's feature check

snap() {
    tar czf "$OUT/.logs.tgz" -C "$LOGS" . 2>/dev/null && mv "$OUT/.logs.tgz" "$OUT/logs.tgz"
    [ -f "$R/drafter/config.json" ] || return 0
    tar cf "$OUT/.heads.tar" -C "$R" drafter history.json data.json 2>/dev/null || return 0
    rm -f "$OUT"/heads.tar.*
    split -b 15000000 -d -a 1 "$OUT/.heads.tar" "$OUT/heads.tar."
    rm -f "$OUT/.heads.tar"
}

size_run() {  # a probe run with the same options: seconds per step and the run's start, then the steps that fit
    local probe="$RUN-probe" t0=$SECONDS
    rm -rf "${WORK:?}/$probe"
    $PY -m gumiho_core.train train --device "$DEV" --run "$probe" "$@" --steps "${PROBE_STEPS:-60}" \
        --checkpoint-minutes 60 >> "$LOGS/probe.log" 2>&1 || { echo "the probe failed: see probe.log"; return 1; }
    local budget=${BUDGET_S:-$SECONDS_MAX}
    $PY - "$WORK/$probe/history.json" "$((SECONDS - t0))" "$(( budget - SECONDS - ${EVAL_S:-30} ))" \
        "${STEPS_MAX:-0}" "$(( (budget + SECONDS_MAX - 1) / SECONDS_MAX ))" "$HANDOVER" > "$R.steps.new" <<'PY' \
        || return 1
import json, sys
rows, wall, left, cap = json.load(open(sys.argv[1])), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
calls, handover = max(1, int(sys.argv[5])), float(sys.argv[6])  # HANDOVER, paid once between two calls
training = sum(r["seconds"] for r in rows)  # the steps alone; the rest of the probe's time is its start and end
per_step = training / rows[-1]["step"]
fit = int((left - calls * (wall - training) - (calls - 1) * handover) / per_step)
steps = min(fit, cap) if cap > 0 else fit
print(f"probe: {per_step:.3f} s a step, {wall - training:.0f} s to start and end; {left:.0f} s left over {calls} "
      f"call(s): {fit} steps fit, {steps} scheduled", file=sys.stderr)
if steps < 1:
    sys.exit("no time left for a run after the probe")
print(steps)
PY
    mv "$R.steps.new" "$R.steps"
}

$PY -m gumiho_core.train extract-features --device "$DEV" --data-dtype float32 "$@" >> "$LOGS/extract.log" 2>&1 \
    || { echo "extract-features failed: see extract.log"; snap; exit 1; }
if [ "${PROFILE_STEPS:-0}" -gt 0 ] && [ ! -f "$R.profiled" ]; then  # once per run, not again when it resumes
    CORPUS=${CORPUS:-$($PY -c "from gumiho_core.training.workspace import DEFAULT_CORPUS; print(DEFAULT_CORPUS)")}
    if $PY scripts/measure_train_speed.py --corpus "$CORPUS" --workdir "$WORK" --steps "$PROFILE_STEPS" \
        --precision "$([ "$DEV" = cpu ] && echo fp32 || echo bf16)" --rollout as-drafted --micro-tokens 8192,4096 \
        --profile "$LOGS/train-profile.txt" > "$LOGS/speed.json" 2> "$LOGS/profile.log"; then
        cat "$LOGS/speed.json" >> "$LOGS/train-profile.txt"
    else
        { echo "the training profile failed (the run goes on):"; tail -20 "$LOGS/profile.log"; } \
            >> "$LOGS/train-profile.txt"
    fi
    touch "$R.profiled"
fi
if [ "${STEPS:-}" = auto ]; then
    [ -f "$R.steps" ] || size_run "$@" || { snap; exit 1; }
    set -- "$@" --steps "$(cat "$R.steps")"
    echo "schedule: $(cat "$R.steps") steps" | tee "$LOGS/steps"
fi
( while sleep 30; do snap; done ) &
LOOP=$!
# timeout's SIGTERM stops the run after the step it is in, with a checkpoint there (a later call loses nothing);
# a run that has not stopped 15 s later is killed, and resumes from its last checkpoint
timeout -k 15 "$(( $(left) - TAIL ))" $PY -m gumiho_core.train train --device "$DEV" --run "$RUN" \
    --checkpoint-minutes 1 "$@" >> "$LOGS/train.log" 2>&1
CODE=$?
kill $LOOP 2>/dev/null
snap
echo "train exited $CODE after $SECONDS s (124: stopped by the time limit; call again to resume)"
[ $CODE -eq 0 ] || exit $CODE

evaluate() {  # heads, where the report goes (where `train steps` looks for it), a name for the log
    [ -f "$2" ] && return 0  # evaluated by an earlier call (a report is written whole, at its end)
    OMP_NUM_THREADS=2 timeout "$(( $(left) - 5 ))" $PY -m gumiho_core.train evaluate --device "$DEV" --draft "$1" \
        --eval-n "${EVAL_N:-8}" --eval-tokens "${EVAL_TOKENS:-96}" --eval-out "$2" < /dev/null \
        > "$LOGS/eval-$3.log" 2>&1 &
}
# the step curve's points, as `train steps` finds them: the heads the run began from, kept and ended with, and
# where each one's report goes (run_commands.kept_heads, step_report_file)
$PY - "$R" > "$LOGS/points" <<'PY'
import sys
from pathlib import Path
from gumiho_core.training.run_commands import kept_heads, step_report_file
run = Path(sys.argv[1])
for step, heads in kept_heads(run):
    print(heads, step_report_file(run, step, heads), f"step{step}", sep="\t")
PY
while IFS=$'\t' read -r heads report name; do
    evaluate "$heads" "$report" "$name"
done < "$LOGS/points"
wait
ls "$R"/drafter*/evaluation.json "$R/evaluation-step0.json" 2>/dev/null | wc -l | xargs echo "evaluations written:"
# the step curve's points without their weights: unpacked into the run's folder at home (after heads.tar),
# `train steps --run RUN --eval-n 8 --eval-tokens 96` (the same EVAL_N and EVAL_TOKENS) reads them (a kept folder's
# config.json says its step) and evaluates only what is missing
(cd "$R" && ls drafter-step*/config.json drafter*/evaluation.json evaluation-step0.json 2>/dev/null \
    | tar cf "$OUT/steps.tar" -T -) || rm -f "$OUT/steps.tar"
# the kept heads with the highest gumiho tau come home too when they are not the last (the step curve turned down):
# best.tar.*, unpacked into the run's folder, is what `train ship --ship-step N` ships
BEST=$($PY - "$R" <<'PY'
import json, sys
from pathlib import Path
run, tau = Path(sys.argv[1]), {}
for heads in [run / "drafter", *sorted(run.glob("drafter-step*"))]:  # the last heads first: they win a tie
    try:
        tau[heads.name] = json.loads((heads / "evaluation.json").read_text())["gumiho"]["mean_accept_len"]
    except (OSError, ValueError, KeyError):
        pass
print(max(tau, key=tau.get) if tau else "")
PY
)
if [ -n "$BEST" ] && [ "$BEST" != drafter ]; then
    tar cf "$OUT/.best.tar" -C "$R" "$BEST" && split -b 15000000 -d -a 1 "$OUT/.best.tar" "$OUT/best.tar."
    rm -f "$OUT/.best.tar"
    echo "the highest gumiho tau is $BEST's, not the last heads': best.tar.* brings them home"
fi
snap
