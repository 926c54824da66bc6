#!/usr/bin/env bash
# Rebuild every default bundle from data: fetch and verify the datasets, train each recipe in
# recipes/ into checkpoints/<name>, export it (parity-checked) into model_repository/<name>, then
# write its model card (`attserve card`: needs ../shared/data/ood-dev or $ATTSERVE_OOD_DIR for the
# out-of-domain figures).
# <name> is the recipe's own `name` field. Training is hours of CPU in all: each recipe states
# its measured wall time.
#
#   scripts/make_models.sh                      # every recipes/*.toml
#   scripts/make_models.sh recipes/bbc-act.toml # just these
#
# Environment: ATTSERVE (the CLI, default "python -m cli.main"), CHECKPOINTS (default
# checkpoints), REPOSITORY (default model_repository), DEVICE (default auto: CUDA when torch
# sees a GPU, which is how the shipped bundles were trained), VARIANTS=1 to also build, measure and
# ship the optimized/fp16/int8 graphs that pass their accuracy check.
set -euo pipefail
cd "$(dirname "$0")/.."

read -r -a ATTSERVE <<< "${ATTSERVE:-python -m cli.main}"
CHECKPOINTS="${CHECKPOINTS:-checkpoints}"
REPOSITORY="${REPOSITORY:-model_repository}"
export_flags=(--force)  # rebuilding the shipped bundles is the point: replace them
if [[ "${VARIANTS:-0}" == 1 ]]; then export_flags+=(--variants); fi

if (($#)); then recipes=("$@"); else recipes=(recipes/*.toml); fi
if [[ ! -f "${recipes[0]}" ]]; then
    echo "no recipes found (looked for ${recipes[*]})" >&2
    exit 1
fi

"${ATTSERVE[@]}" data

for recipe in "${recipes[@]}"; do
    # the recipe's name, and the recipe whose checkpoint it starts from ([train] init_from; trained
    # earlier in this loop, recipes/*.toml being in name order), if any
    fields="$(python -c 'import sys, tomllib; r = tomllib.load(open(sys.argv[1], "rb")); print(r["name"], r.get("train", {}).get("init_from", ""))' "$recipe")"
    read -r name init <<< "$fields"
    train_flags=()
    if [[ -n "$init" ]]; then train_flags+=(--init-from "${CHECKPOINTS}/${init}"); fi
    echo "== ${name}: training ${recipe}" >&2
    "${ATTSERVE[@]}" train "$recipe" --out "${CHECKPOINTS}/${name}" --device "${DEVICE:-auto}" --force "${train_flags[@]}"
    echo "== ${name}: exporting to ${REPOSITORY}/${name}" >&2
    "${ATTSERVE[@]}" export "${CHECKPOINTS}/${name}" --out "${REPOSITORY}/${name}" "${export_flags[@]}"
    # Model card: in-domain and out-of-domain dev metrics, unknown-token share, the temperature
    # fitted on dev (which the service applies), and the known failure modes written by hand.
    card_flags=()
    if [[ -f "model_cards/failure-modes/${name}.json" ]]; then
        card_flags+=(--failure-modes-file "model_cards/failure-modes/${name}.json")
    fi
    echo "== ${name}: model card" >&2
    "${ATTSERVE[@]}" card "${REPOSITORY}/${name}" "${card_flags[@]}"
done
echo "bundles in ${REPOSITORY}/: $(ls "${REPOSITORY}" | tr '\n' ' ')" >&2
