"""An offline training pack: everything some recipes need to train on a machine with no package
registry and no ../shared (`attserve data pack RECIPE... -o DIR`, then
`attserve train DIR/recipes/NAME.toml --data-dir DIR`).

Layout of DIR:

    pack.json                 the manifest: format, each recipe's data / vectors / out-of-domain
                              sets, each dataset's splits metadata, and the sha256 of every file
    recipes/NAME.toml         each recipe resolved: `extends` flattened into one table
    data/DATASET.jsonl.xz     a dataset's splits as loaded (after every split, filter and built
                              evidence list of training.datasets), one example a line:
                              {"split", the example's fields[, "source"]}. A recipe on its own
                              files gets `files-NAME`.
    vectors/SET.npz           a vector set cut to the words the packed recipes' tokenizers use
                              (`words`, `vectors` float16); the whole set's standard deviation
                              is in the manifest (rows without a vector start at that scale)
    ood-dev/FILE.xz           the out-of-domain dev sets, for recipes that select on dev+ood

Training from the pack gives the tokenizer training from the sources gives (the cut keeps every
word the vocabulary takes, in the vector set's order), the same splits and data checksums; the
word vectors are rounded to float16. Every file is checked against the manifest when read.
"""

from __future__ import annotations

import dataclasses
import hashlib
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

from training.examples import ClaimExample, DatasetSplits, Example, PairExample, TextExample, subsample

log = logging.getLogger(__name__)

MANIFEST = "pack.json"
FORMAT = 1
SPLITS = ("train", "dev", "test")
EXAMPLE_TYPES = {cls.__name__: cls for cls in (TextExample, PairExample, ClaimExample)}
OOD_DIR = "ood-dev"
# xz level: the FEVER splits (81 MB of JSON) compress to ~4 MB at 9; each pack is written once
XZ_PRESET = 9


class PackError(RuntimeError):
    """A pack that lacks what a recipe needs, or a file that is not the one its manifest names."""


# ---------------------------------------------------------------------------------------------
# Reading


def is_pack(directory: str | Path | None) -> bool:
    return directory is not None and (Path(directory) / MANIFEST).is_file()


def read_manifest(directory: str | Path) -> dict[str, Any]:
    manifest = json.loads((Path(directory) / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT:
        raise PackError(f"{directory}: pack format {manifest.get('format')!r}, this attserve reads {FORMAT}")
    return manifest


def _verified(directory: Path, relative: str, manifest: dict[str, Any]) -> Path:
    path = directory / relative
    expected = manifest["files"].get(relative)
    if expected is None or not path.is_file():
        raise PackError(f"{directory}: {relative} is not in the pack")
    actual = _sha256(path)
    if actual != expected:
        raise PackError(f"{path}: sha256 {actual}, the manifest says {expected}: the pack was changed after it was written")
    return path


def _recipe_entry(directory: Path, manifest: dict[str, Any], name: str) -> dict[str, Any]:
    try:
        return manifest["recipes"][name]
    except KeyError:
        raise PackError(f"{directory}: recipe {name!r} is not in the pack (it holds {sorted(manifest['recipes'])}); "
                        "pack it with `attserve data pack`") from None


def load_pack_splits(directory: str | Path, recipe: Any) -> DatasetSplits:
    """The recipe's dataset from the pack, as training.datasets loaded it when the pack was written."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    key = _recipe_entry(directory, manifest, recipe.name)["data"]
    meta = manifest["datasets"][key]
    path = _verified(directory, meta["file"], manifest)
    parts: dict[str, list[Example]] = {split: [] for split in SPLITS}
    sources: dict[str, list[str]] = {split: [] for split in SPLITS}
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        for line in tqdm(handle, desc=f"read {path.name}", unit="example", total=sum(meta["sizes"].values()), disable=None, leave=False):
            row = json.loads(line)
            split, source = row.pop("split"), row.pop("source", None)
            parts[split].append(_example(meta["example_type"], row))
            if source is not None:
                sources[split].append(source)
    log.info("pack splits loaded", extra={"pack": str(directory), "dataset": meta["name"], **{s: len(parts[s]) for s in SPLITS}})
    return DatasetSplits(name=meta["name"], task=meta["task"], labels=list(meta["labels"]), checksums=dict(meta["checksums"]),
                         description=meta["description"], sources={k: v for k, v in sources.items() if v}, **parts)


def _example(type_name: str, row: dict[str, Any]) -> Example:
    if type_name == "ClaimExample":
        row["evidence"] = tuple(row["evidence"])
    return EXAMPLE_TYPES[type_name](**row)


def load_pack_vectors(directory: str | Path, recipe: Any) -> tuple[list[str], np.ndarray]:
    """(words, vectors (N, D) float32) of the recipe's vector set, cut to the packed recipes' words."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    key = _recipe_entry(directory, manifest, recipe.name)["vectors"]
    if key is None:
        raise PackError(f"{directory}: recipe {recipe.name} was packed without vectors ([embeddings] glove = false)")
    with np.load(_verified(directory, manifest["vectors"][key]["file"], manifest), allow_pickle=False) as saved:
        words, vectors = [str(w) for w in saved["words"]], saved["vectors"].astype(np.float32)
    log.info("pack vectors loaded", extra={"pack": str(directory), "vectors": key, "words": len(words), "dim": vectors.shape[1]})
    return words, vectors


def pack_vectors_std(directory: str | Path, recipe: Any) -> float | None:
    """The whole vector set's standard deviation (the scale of the rows without a vector)."""
    manifest = read_manifest(directory)
    key = _recipe_entry(Path(directory), manifest, recipe.name)["vectors"]
    return None if key is None else float(manifest["vectors"][key]["std"])


def pack_ood_dir(directory: str | Path) -> Path:
    """The pack's out-of-domain dev sets (training.ood reads their .xz files), checked against the manifest."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    for relative in manifest["files"]:
        if relative.startswith(f"{OOD_DIR}/"):
            _verified(directory, relative, manifest)
    return directory / OOD_DIR


# ---------------------------------------------------------------------------------------------
# Writing


def write_pack(recipe_paths: Sequence[str | Path], out_dir: str | Path, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Write the pack for `recipe_paths` into `out_dir` (replaced); returns the manifest."""
    from training.embeddings import VECTOR_SETS
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
        manifest["files"][file.relative_to(out_dir).as_posix()] = _sha256(file)
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


__all__ = ["MANIFEST", "PackError", "is_pack", "load_pack_splits", "load_pack_vectors", "pack_ood_dir", "pack_vectors_std",
           "read_manifest", "toml_text", "write_pack"]
