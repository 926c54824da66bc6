#!/usr/bin/env bash
# Bring your own transformer, timed (docs/transformers.md): take a fine-tuned Hugging Face
# sequence classifier (a save_pretrained folder), export it to ONNX, import it as a verification
# and an entailment bundle into a model repository of its own, serve that repository, and ask
# /v1/models, /entailment and /verify once each. Prints each step's wall time.
#
#   examples/hf/journey.sh [MODEL_DIR] [WORK_DIR]
#
# MODEL_DIR defaults to /tmp/hf-journey/fever-bert; when it does not exist it is trained first
# (examples/hf/train_fever_nli.py, 10 minutes on one CPU thread). WORK_DIR (default
# /tmp/hf-journey) receives exported/ and repo/. Run from the checkout's root.
set -euo pipefail

MODEL=${1:-/tmp/hf-journey/fever-bert}
WORK=${2:-/tmp/hf-journey}
PORT=${PORT:-8763}
PY=.venv/bin/python
EXPORTED=$WORK/exported
REPO=$WORK/repo
URL=http://127.0.0.1:$PORT
OPTIMUM_CLI=${OPTIMUM_CLI:-optimum-cli}  # e.g. "env PYTHONPATH=/opt/optimum /opt/optimum/bin/optimum-cli"

step() {  # step NAME COMMAND...: run it, print its wall time
  local name=$1 start end
  shift
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  awk -v name="$name" -v s="$start" -v e="$end" 'BEGIN { printf "== %-28s %7.2f s\n", name, e - s }'
}

export_model() {
  rm -rf "$EXPORTED"
  # optimum's exporter first, as a user runs it; optimum-onnx 0.1 needs transformers < 4.58, so
  # with a newer transformers it fails at import and the torch.onnx route writes the same folder
  if $OPTIMUM_CLI export onnx --model "$MODEL" --task text-classification "$EXPORTED" >"$WORK/optimum.log" 2>&1; then
    echo "exported with optimum-cli"
    # a tokenizer saved by transformers 5 (tokenizer_class TokenizersBackend) is one transformers 4
    # cannot load, and optimum then writes none, without an error: take the model's own file
    if [ ! -f "$EXPORTED/tokenizer.json" ]; then
      echo "optimum wrote no tokenizer.json: copying the model's"
      cp "$MODEL/tokenizer.json" "$EXPORTED/"
    fi
  else
    echo "optimum-cli failed: $(grep -E 'Error|error' "$WORK/optimum.log" | tail -1)"
    echo "exporting with torch.onnx (examples/hf/export_onnx.py)"
    rm -rf "$EXPORTED"
    "$PY" -m examples.hf.export_onnx "$MODEL" "$EXPORTED" 2>/dev/null
  fi
}

serve_until_ready() {
  .venv/bin/attserve serve --model-repository "$REPO" --port "$PORT" >"$WORK/serve.log" 2>&1 &
  echo $! >"$WORK/serve.pid"
  until curl -sf "$URL/health/ready" >/dev/null; do
    kill -0 "$(cat "$WORK/serve.pid")" 2>/dev/null || { cat "$WORK/serve.log"; exit 1; }
    sleep 0.2
  done
}

ask() {  # ask PATH BODY
  curl -sf "$URL$1" -H 'content-type: application/json' ${2:+-d "$2"}
  echo
}

list_models() {  # each model's name, task and kind
  ask /v1/models | "$PY" -c 'import json, sys; [print(m["name"], m["task"], m["kind"]) for m in json.load(sys.stdin)["models"]]'
}

mkdir -p "$WORK"
[ -d "$MODEL" ] || step "train (10 min budget)" nice -n 19 "$PY" -m examples.hf.train_fever_nli --out "$MODEL"
step "export to ONNX" export_model
rm -rf "$REPO"
step "import --task verification" .venv/bin/attserve bundle import-hf "$EXPORTED" --task verification \
  -o "$REPO/fever-bert-verify" --reference "$MODEL"
step "import --task entailment" .venv/bin/attserve bundle import-hf "$EXPORTED" --task entailment \
  -o "$REPO/fever-bert-nli" --reference "$MODEL"
trap 'kill "$(cat "$WORK/serve.pid")" 2>/dev/null || true' EXIT
step "serve until ready" serve_until_ready
step "GET /v1/models" list_models
step "POST /entailment" ask /entailment \
  '{"premise": "Paris is the capital and most populous city of France.", "hypothesis": "Paris is in Germany."}'
step "POST /verify" ask /verify \
  '{"claim": "Paris is the capital of France.", "evidence": ["Paris is the capital and most populous city of France.", "The Great Barrier Reef is the largest coral reef system."]}'
