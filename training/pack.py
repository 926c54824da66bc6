"""An offline training pack: everything some recipes need to train on a machine with no package
registry and no ../shared (`attserve data pack RECIPE... -o DIR`, then
`attserve train DIR/recipes/NAME.toml --data-dir DIR`). This module reads a pack (the trainer
imports it); training.pack_writer writes one.

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

import hashlib
import json
import logging
import lzma
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from training.examples import ClaimExample, DatasetSplits, Example, PairExample, TextExample

log = logging.getLogger(__name__)

MANIFEST = "pack.json"
FORMAT = 1
SPLITS = ("train", "dev", "test")
EXAMPLE_TYPES = {cls.__name__: cls for cls in (TextExample, PairExample, ClaimExample)}
OOD_DIR = "ood-dev"


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
    actual = sha256_of(path)
    if actual != expected:
        raise PackError(f"{path}: sha256 {actual}, the manifest says {expected}: the pack was changed after it was written")
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


__all__ = ["MANIFEST", "PackError", "is_pack", "load_pack_splits", "load_pack_vectors", "pack_ood_dir", "pack_vectors_std",
           "read_manifest"]
