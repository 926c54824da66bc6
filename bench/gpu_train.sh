#!/usr/bin/env bash
# Train the paper-scale recipes (recipes/gpu/) on a lent GPU machine in ONE device call, from the
# offline training pack: no registry, no ../shared there. docs/models.md, "Training on a lent GPU".
#
# Here, once (needs the data cache, ../shared and a registry for the wheels):
#   bash bench/gpu_train.sh prepare     # training-pack/ (attserve data pack) + gpu-wheels/ (pydantic & co.)
# There, through the device tool (repo root; $OUT is the folder that comes back):
#   bash bench/gpu_train.sh             # carry: ["training-pack", "gpu-wheels"], timeout_s 570
#
# Each recipe trains with --device cuda --time-budget MINUTES (bf16 autocast, fused Adam, DataLoader
# workers; the budget counts data preparation and the closing evaluation, and keeps the best
# weights by dev). Then its checkpoint is slimmed (training.checkpoint_transfer: the frozen
# pretrained table, rebuilt here from the same pack, is dropped), and the checkpoints travel back
# as one xz tar cut in 15 MiB parts (at most 8 files of 16 MiB come back). What comes back:
#   summary.txt   GPU, torch, and per recipe: rc, items/s, epochs, best epoch/step, dev/test accuracy, wall time
#   train.log     the trainer's log lines (every dev evaluation, the time budget's end)
#   metrics-NAME.json            each checkpoint's metrics.json
#   checkpoints.tar.xz.part-NN   cat them | tar -xJ -C DIR, then per NAME:
#                 python -m training.checkpoint_transfer restore DIR/NAME --data-dir training-pack -o checkpoints/NAME
# Environment: RECIPES ("NAME:MINUTES ..."), DEVICE (cuda; cpu for a dry run here), THREADS (0: every core),
# PACK, WHEELS, PYTHON.
set -uo pipefail
cd "$(dirname "$0")/.."

RECIPES=${RECIPES:-"fever-attconv-gpu:3.25 snli-attconv-gpu:2.5 scitail-attconv-gpu:1.5"}
DEVICE=${DEVICE:-cuda}
PACK=${PACK:-training-pack}
WHEELS=${WHEELS:-gpu-wheels}
PY=${PYTHON:-python3}

if [ "${1:-run}" = prepare ]; then
    PY=${PYTHON:-.venv/bin/python}
    if [ ! -f "$PACK/pack.json" ]; then
        "$PY" -m cli.main data pack recipes/gpu/fever-attconv-gpu.toml recipes/gpu/snli-attconv-gpu.toml \
            recipes/gpu/scitail-attconv-gpu.toml -o "$PACK" || exit 1
    fi
    # the packages the GPU image lacks (its package list, docs/models.md "Training on a lent GPU"),
    # at the versions the training venv runs, for its Python 3.12
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$WHEELS" \
        pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 || exit 1
    du -sh "$PACK" "$WHEELS"
    echo "tracked + untracked files that travel, with the pack and wheels (limit 64 MiB):"
    { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 du -cb 2>/dev/null | tail -1 \
        | awk -v extra="$(du -sb "$PACK" "$WHEELS" | awk '{s+=$1} END {print s}')" '{printf "%.1f MiB\n", ($1 + extra) / 2^20}'
    exit 0
fi

OUT=${OUT:?"set OUT to the folder whose files come back (the device tool sets it)"}
started=$(date +%s)
if compgen -G "$WHEELS/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 3
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
summary="$OUT/summary.txt"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')"
} | tee "$summary"

slim=checkpoints/gpu-slim  # under the git-ignored checkpoints/: a dry run here leaves nothing to commit
rm -rf "$slim" && mkdir -p "$slim"
for spec in $RECIPES; do
    name=${spec%%:*}
    minutes=${spec##*:}
    tick=$(date +%s)
    "$PY" -m cli.main train "$PACK/recipes/$name.toml" --data-dir "$PACK" --device "$DEVICE" --time-budget "$minutes" \
        --threads "${THREADS:-0}" --no-progress --force -o "checkpoints/$name" >> "$OUT/train.log" 2>&1
    rc=$?
    if [ -f "checkpoints/$name/metrics.json" ]; then
        cp "checkpoints/$name/metrics.json" "$OUT/metrics-$name.json"
        "$PY" - "$name" "$rc" "$(( $(date +%s) - tick ))" <<'PY' | tee -a "$summary"
import json, sys
name, rc, wall = sys.argv[1:]
m = json.load(open(f"checkpoints/{name}/metrics.json"))
print(f"{name}: rc {rc}, {m['train_examples_per_s']:.0f} items/s, {m['epochs_run']} epochs (best epoch {m['best_epoch']} step "
      f"{m['best_step']}), dev {m['dev']['accuracy']:.4f}, test {m['test']['accuracy']:.4f}, trainer {m['wall_time_s']:.0f} s, "
      f"command {wall} s, out of time {m['out_of_time']}, {m['device']} {m['gpu']} autocast {m['autocast']}")
PY
        "$PY" -m training.checkpoint_transfer slim "checkpoints/$name" --data-dir "$PACK" -o "$slim/$name" >> "$OUT/train.log" 2>&1
    else
        echo "$name: rc $rc, no checkpoint (see train.log)" | tee -a "$summary"
        tail -20 "$OUT/train.log"
    fi
done
tar -C "$slim" -cf - . | xz -T0 -1 | split -b 15M -d - "$OUT/checkpoints.tar.xz.part-"
ls -l "$OUT" | tee -a "$summary"
echo "total $(( $(date +%s) - started )) s" | tee -a "$summary"
