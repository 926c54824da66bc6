#!/usr/bin/env bash
# Rebuild every default bundle from data: fetch and verify the datasets, train each recipe in
# recipes/ into checkpoints/<name>, export it (parity-checked) into model_repository/<name>, then
# write its model card (`attserve card`: needs ../shared/data/ood-dev or $ATTSERVE_OOD_DIR for the
# out-of-domain figures).
# <name> is the recipe's own `name` field. Training is hours of CPU in all: each recipe states
# its measured wall time. A recipe that starts from another's checkpoint ([train] init_from) or
# averages with one ([train] average_with) is trained after it, whether it says so itself or
# takes it from the recipe it extends (training.recipes.recipe_table); a recipe with `ship = false` is
# trained (others start from it) but not exported;
# a recipe with `default = true` gets `"default": true` in its bundle's config.json (its task's
# default model, service/settings.py).
#
#   tools/make_models.sh                        # every recipes/*.toml, each after the ones it needs
#   tools/make_models.sh recipes/bbc-act.toml   # just these, in the order given
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

if (($#)); then
    recipes=("$@")
else
    # name order, except that a recipe comes after the one whose checkpoint it starts from
    mapfile -t recipes < <(python - recipes/*.toml <<'PY'
import sys
from training.recipes import recipe_table
paths = sys.argv[1:]
parent = {}
by_name = {}
for path in paths:
    recipe = recipe_table(path)  # with what it extends filled in
    by_name[recipe["name"]] = path
    train = recipe.get("train", {})
    parent[recipe["name"]] = [n for n in (train.get("init_from"), train.get("average_with")) if n]
order, done = [], set()
def visit(name, seen=()):
    if name in seen:
        sys.exit(f"init_from/average_with cycle through {name}")
    if name in done:
        return
    for first in parent[name]:
        if first in by_name:
            visit(first, (*seen, name))
    done.add(name)
    order.append(by_name[name])
for name in parent:
    visit(name)
print("\n".join(order))
PY
)
fi
if [[ ! -f "${recipes[0]}" ]]; then
    echo "no recipes found (looked for ${recipes[*]})" >&2
    exit 1
fi

"${ATTSERVE[@]}" data

for recipe in "${recipes[@]}"; do
    # the recipe's name, whether it ships, and the recipe whose checkpoint it starts from ([train]
    # init_from; trained earlier in this loop), if any
    fields="$(python -c 'import sys; from training.recipes import recipe_table; r = recipe_table(sys.argv[1]); t = r.get("train", {}); print(r["name"], int(r.get("ship", True)), int(r.get("default", False)), t.get("init_from", "-"), t.get("average_with", "-"))' "$recipe")"
    read -r name ship default init average <<< "$fields"
    train_flags=()
    if [[ "$init" != "-" ]]; then train_flags+=(--init-from "${CHECKPOINTS}/${init}"); fi
    if [[ "$average" != "-" ]]; then train_flags+=(--average-with "${CHECKPOINTS}/${average}"); fi
    echo "== ${name}: training ${recipe}" >&2
    "${ATTSERVE[@]}" train "$recipe" --out "${CHECKPOINTS}/${name}" --device "${DEVICE:-auto}" --force "${train_flags[@]}"
    if [[ "$ship" == 0 ]]; then
        echo "== ${name}: not shipped (ship = false): the checkpoint is kept for the recipes that start from it" >&2
        continue
    fi
    echo "== ${name}: exporting to ${REPOSITORY}/${name}" >&2
    "${ATTSERVE[@]}" export "${CHECKPOINTS}/${name}" --out "${REPOSITORY}/${name}" "${export_flags[@]}"
    if [[ "$default" == 1 ]]; then
        # "default": true right after "name", written as export writes config.json (pydantic's JSON)
        python - "${REPOSITORY}/${name}/config.json" <<'PY'
import json, sys
from pathlib import Path
import pydantic_core
path = Path(sys.argv[1])
raw = {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if k != "default"}
keys = list(raw)
raw = {**{k: raw[k] for k in keys[: keys.index("name") + 1]}, "default": True, **{k: raw[k] for k in keys[keys.index("name") + 1 :]}}
path.write_text(pydantic_core.to_json(raw, indent=2).decode("utf-8") + "\n", encoding="utf-8")
PY
    fi
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
