"""Write an offline training pack (`attserve data pack RECIPE... -o DIR`): the layout and how it
is read are training.pack's. Building it needs what training from the sources needs (the data
cache, ../shared or $ATTSERVE_BENCHMARK_DIR, $ATTSERVE_OOD_DIR); training from it needs none."""

from __future__ import annotations

import dataclasses
import json
import logging
import lzma
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from training.examples import DatasetSplits, subsample
from training.pack import FORMAT, MANIFEST, OOD_DIR, SPLITS, PackError, sha256_of

log = logging.getLogger(__name__)

# xz level: the FEVER splits (81 MB of JSON) compress to 4.2 MB at 9; a pack is written once
XZ_PRESET = 9


def write_pack(recipe_paths: Sequence[str | Path], out_dir: str | Path, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Write the pack for `recipe_paths` into `out_dir` (replaced); returns the manifest."""
    from training.ood import FEVER_FILE, RTE_FILE, SNLI_FILE, ood_dir
    from training.recipes import load_recipe, recipe_table
    from training.trainer import load_splits, load_vectors, recipe_tokenizer

    out_dir = Path(out_dir)
    if out_dir.exists():
        if not (out_dir / MANIFEST).is_file() and any(out_dir.iterdir()):
            raise PackError(f"{out_dir} exists and is not a training pack: choose another directory")
        shutil.rmtree(out_dir)
    for sub in ("recipes", "data", "vectors"):
        (out_dir / sub).mkdir(parents=True)
    manifest: dict[str, Any] = {"format": FORMAT, "recipes": {}, "datasets": {}, "vectors": {}, "files": {}}
    words_of_set: dict[str, set[str]] = {}
    vector_sets: dict[str, tuple[list[str], np.ndarray]] = {}
    ood_tasks: set[str] = set()

    for path in map(Path, recipe_paths):
        recipe = load_recipe(path)
        if recipe.name in manifest["recipes"]:
            raise PackError(f"two recipes named {recipe.name!r}")
        if recipe.train.init_from or recipe.train.average_with:
            raise PackError(f"{path}: {recipe.name} starts from (or averages with) another recipe's checkpoint; a pack "
                            "holds data and vectors, not checkpoints: pack recipes that train from the vectors")
        splits = load_splits(recipe, cache_dir)
        data_key = recipe.data.dataset or f"files-{recipe.name}"
        if data_key not in manifest["datasets"]:
            manifest["datasets"][data_key] = _write_splits(out_dir, data_key, splits)
        vectors_key = None
        if recipe.embeddings.glove:
            vectors_key = recipe.embeddings.vectors if recipe.embeddings.glove_file is None else f"file-{recipe.name}"
            if vectors_key not in vector_sets:
                vector_sets[vectors_key] = load_vectors(recipe, cache_dir)
            # the words this recipe's vocabulary takes (training words and its pretrained prefix)
            vocab = recipe_tokenizer(recipe, subsample(splits.train, recipe.train.max_train_examples, recipe.train.seed),
                                     vector_sets[vectors_key]).get_vocab()
            words_of_set.setdefault(vectors_key, set()).update(vocab)
        if recipe.train.select_on == "dev+ood":
            ood_tasks.add(splits.task)
        table = recipe_table(path)
        table.pop("extends", None)
        recipe_file = f"recipes/{recipe.name}.toml"
        (out_dir / recipe_file).write_text(
            f"# {recipe.name}, resolved from {path.name} by `attserve data pack` (extends flattened)\n" + toml_text(table), encoding="utf-8")
        manifest["recipes"][recipe.name] = {"recipe": recipe_file, "data": data_key, "vectors": vectors_key,
                                            "ood": recipe.train.select_on == "dev+ood"}

    for key, (words, table) in vector_sets.items():
        manifest["vectors"][key] = _write_vectors(out_dir, key, words, table, words_of_set[key])
    if ood_tasks:
        source = ood_dir()
        (out_dir / OOD_DIR).mkdir()
        for name in (SNLI_FILE, RTE_FILE, FEVER_FILE):
            if not (source / name).is_file():
                raise PackError(f"a packed recipe selects on dev+ood, but {source / name} is missing ($ATTSERVE_OOD_DIR)")
            (out_dir / OOD_DIR / f"{name}.xz").write_bytes(lzma.compress((source / name).read_bytes(), preset=XZ_PRESET))

    for file in sorted(p for p in out_dir.rglob("*") if p.is_file() and p.name != MANIFEST):
        manifest["files"][file.relative_to(out_dir).as_posix()] = sha256_of(file)
    manifest["bytes"] = sum((out_dir / f).stat().st_size for f in manifest["files"])
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    log.info("pack written", extra={"pack": str(out_dir), "recipes": list(manifest["recipes"]), "bytes": manifest["bytes"]})
    return manifest


def _write_splits(out_dir: Path, key: str, splits: DatasetSplits) -> dict[str, Any]:
    relative = f"data/{key}.jsonl.xz"
    types = {type(e).__name__ for split in SPLITS for e in getattr(splits, split)}
    if len(types) != 1:
        raise PackError(f"{key}: mixed example types {sorted(types)}")
    lines = []
    for split in SPLITS:
        sources = splits.sources.get(split) or []
        for i, example in enumerate(getattr(splits, split)):
            row = {"split": split, **dataclasses.asdict(example)}
            if sources:
                row["source"] = sources[i]
            lines.append(json.dumps(row, ensure_ascii=False))
    payload = ("\n".join(lines) + "\n").encode("utf-8")
    with tqdm(total=1, desc=f"xz {relative} ({len(payload) / 1e6:.0f} MB)", disable=None, leave=False) as bar:
        (out_dir / relative).write_bytes(lzma.compress(payload, preset=XZ_PRESET))
        bar.update(1)
    return {"file": relative, "name": splits.name, "task": splits.task, "labels": list(splits.labels),
            "example_type": types.pop(), "checksums": dict(splits.checksums), "description": splits.description,
            "sizes": {split: len(getattr(splits, split)) for split in SPLITS}}


def _write_vectors(out_dir: Path, key: str, words: list[str], table: np.ndarray, wanted: set[str]) -> dict[str, Any]:
    """The rows of `words` in `wanted`, in the set's order (the first of a repeated word, as
    training.embeddings.embedding_matrix takes it), as float16."""
    relative = f"vectors/{key}.npz"
    seen: set[str] = set()
    rows = []
    for row, word in enumerate(words):
        if word in wanted and word not in seen:
            seen.add(word)
            rows.append(row)
    kept = np.asarray(rows, dtype=np.int64)
    np.savez_compressed(out_dir / relative, words=np.asarray([words[i] for i in rows], dtype=str),
                        vectors=table[kept].astype(np.float16))
    return {"file": relative, "words": len(rows), "of_words": len(words), "dim": int(table.shape[1]), "std": float(table.std())}


# ---------------------------------------------------------------------------------------------
# A recipe table back to TOML (the standard library reads TOML but does not write it)

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def toml_text(table: dict[str, Any]) -> str:
    """A recipe table (top-level keys, then one level of tables whose dict values are inline
    tables) as TOML; checked to read back as the same table."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for name, section in table.items():
        if isinstance(section, dict):
            lines += ["", f"[{_key(name)}]", *(f"{_key(k)} = {_value(v)}" for k, v in section.items())]
    text = "\n".join(lines) + "\n"
    if tomllib.loads(text) != table:
        raise ValueError("the recipe table does not survive TOML writing")
    return text


__all__ = ["toml_text", "write_pack"]
