"""FEVER data (training/fever.py, the `fever-csv` reader and the `fever` / `fever-nli` / `fever-swaps` datasets)
on a small csv written here: plain text from the dump's tokenization, dropped rows counted, fact
groups kept on one side of a split, and evidence lists built as the module promises."""

from __future__ import annotations

import csv
import lzma
from collections import Counter
from pathlib import Path

import pytest

from training.fever import (
    NOT_ENOUGH_INFO,
    FeverClaim,
    build_evidence_lists,
    detokenize_fever,
    entailment_pairs,
    evaluation_views,
    read_fever,
    split_fever,
    substitution_claims,
    view_metrics,
)
from training.readers import FormatError, read_file

TOPICS = ["paris", "tokyo", "berlin", "madrid", "rome", "vienna", "oslo", "lisbon", "dublin", "prague",
          "athens", "warsaw", "helsinki", "budapest", "brussels", "amsterdam", "zurich", "geneva"]


def _rows() -> list[dict[str, str]]:
    rows = []
    for t, topic in enumerate(TOPICS):
        fact = f"{topic.title()} -LRB- city -RRB- is the capital of country{t} , with river{t} ."
        other = f"{topic.title()} hosts the festival{t} every summer ."
        rows.append({"id": f"{t}1", "verifiable": "VERIFIABLE", "label": "SUPPORTS",
                     "claim": f"{topic.title()} is a capital.", "evidence": repr([fact, fact])})
        rows.append({"id": f"{t}2", "verifiable": "VERIFIABLE", "label": "REFUTES",
                     "claim": f"{topic.title()} is a village in country{t}.", "evidence": repr([fact, other])})
        rows.append({"id": f"{t}3", "verifiable": "NOT VERIFIABLE", "label": NOT_ENOUGH_INFO,
                     "claim": f"{topic.title()} has a zoo with pandas{t}.", "evidence": "[]"})
    rows.append({"id": "99", "verifiable": "VERIFIABLE", "label": "REFUTES", "claim": "Lost page.", "evidence": "[]"})
    return rows


def _write(path: Path, rows: list[dict[str, str]], xz: bool = False) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["id", "verifiable", "label", "claim", "evidence"])
        writer.writeheader()
        writer.writerows(rows)
    if xz:
        target = path.with_name(path.name + ".xz")
        target.write_bytes(lzma.compress(path.read_bytes()))
        return target
    return path


def test_detokenize_makes_the_dump_plain_text():
    assert detokenize_fever("Hoffman -LRB- born August 8 , 1937 -RRB- is an actor .") == "Hoffman (born August 8, 1937) is an actor."
    assert detokenize_fever("He said `` yes '' -COLON- it is n't his -LSB- sic -RSB- .") == 'He said "yes": it isn\'t his [sic].'
    assert detokenize_fever("It 's 50 % of the U.S. market") == "It's 50% of the U.S. market"


def test_read_fever_plain_text_deduplicated_and_drops_counted(tmp_path):
    claims, dropped = read_fever(_write(tmp_path / "train.csv", _rows(), xz=True))
    assert dropped == Counter({"REFUTES without evidence": 1})
    assert len(claims) == 3 * len(TOPICS)
    first = claims[0]
    assert first.evidence == ("Paris (city) is the capital of country0, with river0.",)  # the repeated sentence once
    assert all(not c.evidence for c in claims if c.label == NOT_ENOUGH_INFO)


def test_fever_csv_reader_format(tmp_path):
    examples = read_file(_write(tmp_path / "train.csv", _rows()), "fever-csv")
    assert {e.label for e in examples} == {"SUPPORTS", "REFUTES"}  # no evidence, no example
    assert all("-LRB-" not in s for e in examples for s in e.evidence)
    bad = _rows()[:1]
    bad[0]["evidence"] = "__import__('os').system('true')"
    with pytest.raises(FormatError, match="literal"):
        read_file(_write(tmp_path / "bad.csv", bad), "fever-csv")


def test_split_keeps_a_fact_on_one_side(tmp_path):
    claims, _ = read_fever(_write(tmp_path / "train.csv", _rows()))
    train, dev, test = split_fever(claims, seed=1, dev_fraction=0.2, test_fraction=0.2)
    assert sorted(c.id for c in train + dev + test) == sorted(c.id for c in claims)
    side = {}
    for name, part in (("train", train), ("dev", dev), ("test", test)):
        for c in part:
            if c.evidence:
                assert side.setdefault(c.evidence[0], name) == name
    assert dev and test


def test_evidence_lists(tmp_path):
    claims, _ = read_fever(_write(tmp_path / "train.csv", _rows()))
    examples = build_evidence_lists(claims, seed=0, split="train", max_evidence=4, gold_only_fraction=0.0,
                                    unrelated_nei_fraction=0.0, off_topic_fraction=0.0)
    again = build_evidence_lists(claims, seed=0, split="train", max_evidence=4, gold_only_fraction=0.0,
                                 unrelated_nei_fraction=0.0, off_topic_fraction=0.0)
    assert examples == again  # deterministic
    positions = Counter()
    for claim, example in zip(claims, examples):
        assert example.claim == claim.claim and example.label == claim.label
        assert 1 <= len(example.evidence) <= 4 and len(set(example.evidence)) == len(example.evidence)
        if claim.label == NOT_ENOUGH_INFO:
            assert example.gold_evidence is None
            continue
        assert set(claim.evidence) <= set(example.evidence)
        assert len(example.evidence) > len(claim.evidence)  # gold_only_fraction 0: a distractor always
        distractors = set(example.evidence) - set(claim.evidence)
        # never a sentence of the claim's own fact group (its topic's sentences here)
        topic = claim.claim.split()[0]
        assert not any(s.startswith(topic) for s in distractors)
        if len(claim.evidence) == 1:
            assert example.evidence[example.gold_evidence] == claim.evidence[0]
            positions[example.gold_evidence] += 1
        else:
            assert example.gold_evidence is None
    assert len(positions) > 1  # the gold sentence is not always in the same slot
    # NOT ENOUGH INFO with retrieval only: on-topic sentences (its city's), which do not settle it
    nei = [e for c, e in zip(claims, examples) if c.label == NOT_ENOUGH_INFO]
    assert sum(e.claim.split()[0] in " ".join(e.evidence) for e in nei) >= 0.9 * len(nei)


def test_unrelated_nei_and_gold_only(tmp_path):
    claims, _ = read_fever(_write(tmp_path / "train.csv", _rows()))
    examples = build_evidence_lists(claims, seed=0, split="dev", gold_only_fraction=1.0, unrelated_nei_fraction=1.0)
    on_topic = 0
    for claim, example in zip(claims, examples):
        if claim.label != NOT_ENOUGH_INFO:
            assert sorted(example.evidence) == sorted(claim.evidence)
        else:
            on_topic += claim.claim.split()[0] in " ".join(example.evidence)
    # random sentences: about its own city only by chance (retrieved: at least 90%, test above)
    assert on_topic <= len(TOPICS) // 2


def test_entailment_pairs_map_labels(tmp_path):
    claims, _ = read_fever(_write(tmp_path / "train.csv", _rows()))
    examples = build_evidence_lists(claims, seed=0, split="train")
    pairs = entailment_pairs(claims, examples, seed=0, split="train")
    assert len(pairs) == len(claims)
    mapping = {("SUPPORTS", "entailment"), ("REFUTES", "contradiction"), (NOT_ENOUGH_INFO, "neutral")}
    assert {(c.label, p.label) for c, p in zip(claims, pairs)} == mapping
    for c, e, p in zip(claims, examples, pairs):
        assert p.hypothesis == c.claim
        if c.evidence:
            assert p.premise == " ".join(c.evidence[:3])
        else:  # one or two of the sentences its NOT ENOUGH INFO list was built with
            assert p.premise in (e.evidence[0], " ".join(e.evidence[:2]))


def _load_from_rows(tmp_path, monkeypatch, rows, *names):
    """The named FEVER datasets read from `rows` written as a benchmark folder's train.csv.xz,
    with 30% dev and 30% test so that both splits have evidence."""
    from training import datasets

    (tmp_path / "fever").mkdir()
    _write(tmp_path / "fever" / "train.csv", rows, xz=True)
    monkeypatch.setenv(datasets.BENCHMARK_DIR_ENV, str(tmp_path))
    monkeypatch.setattr("training.fever.DEV_FRACTION", 0.3)
    monkeypatch.setattr("training.fever.TEST_FRACTION", 0.3)
    datasets._fever_parts.cache_clear()
    try:
        return [datasets.load_dataset(name) for name in names]
    finally:
        datasets._fever_parts.cache_clear()


def test_fever_dataset_loads_from_a_benchmark_dir(tmp_path, monkeypatch):
    verification, nli = _load_from_rows(tmp_path, monkeypatch, _rows(), "fever", "fever-nli")
    assert verification.task == "verification" and nli.task == "entailment"
    assert verification.labels == ["SUPPORTS", "REFUTES", NOT_ENOUGH_INFO]
    assert len(verification.train) + len(verification.dev) + len(verification.test) == 3 * len(TOPICS)
    assert [p.hypothesis for p in nli.train] == [c.claim for c in verification.train]
    assert "fever/fever/train.csv.xz" in verification.checksums


COUNTRIES = ["France", "Germany", "Spain", "Italy", "Austria", "Norway", "Portugal", "Ireland"]


def _substitution_source() -> list[FeverClaim]:
    claims = []
    for t, (city, country) in enumerate(zip(["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Oslo", "Lisbon", "Dublin"], COUNTRIES)):
        fact = f"{city} is the capital and largest city of {country}, founded in {1900 + t}."
        claims.append(FeverClaim(f"{t}a", f"{city} is the capital of {country}.", "SUPPORTS", (fact,)))
        claims.append(FeverClaim(f"{t}b", f"{city} was founded in {1900 + t}.", "SUPPORTS", (fact,)))
        claims.append(FeverClaim(f"{t}c", f"{city} is small.", "SUPPORTS", (fact,)))  # nothing to swap
        claims.append(FeverClaim(f"{t}d", f"{city} is the capital of Mars Colony.", "REFUTES", (fact,)))
        claims.append(FeverClaim(f"{t}e", f"{city} has a zoo in {country}.", NOT_ENOUGH_INFO, ()))
    return claims


def test_substitution_claims_swap_one_stated_name_or_year():
    claims = _substitution_source()
    source = {c.id: c for c in claims}
    swaps = substitution_claims(claims, seed=0, fraction=1.0, min_pool=5)
    assert swaps == substitution_claims(claims, seed=0, fraction=1.0, min_pool=5)  # deterministic
    # every SUPPORTS claim with a name after its subject or a year, and only those
    assert sorted(s.id for s in swaps) == sorted(f"{t}{k}:swap" for t in range(len(COUNTRIES)) for k in "ab")
    for swap in swaps:
        original = source[swap.id.removesuffix(":swap")]
        assert swap.label == "REFUTES" and swap.evidence == original.evidence
        old, new = original.claim.split(), swap.claim.split()
        changed = [(a, b) for a, b in zip(old, new) if a != b]
        assert len(old) == len(new) and len(changed) == 1  # one span, the subject kept
        before, after = (w.rstrip(".") for w in changed[0])
        assert before in original.evidence[0] and after not in original.evidence[0]
        if before.isdigit():
            assert 1 <= abs(int(after) - int(before)) <= 10
        else:  # another country: the names that follow "capital of" in the other claims
            assert after in COUNTRIES


def test_substitution_claims_fraction_and_small_pools():
    claims = _substitution_source()
    assert substitution_claims(claims, seed=0, fraction=0.0) == []
    # with no context pool of min_pool names, a name swap draws among all names of its length;
    # a claim whose only candidates are its own or the evidence's names gives none
    one = [FeverClaim("x", "Paris is in France.", "SUPPORTS", ("Paris is in France.",))]
    assert substitution_claims(one, seed=0, fraction=1.0) == []


def test_fever_swaps_dataset_adds_train_refutes_only(tmp_path, monkeypatch):
    rows = [{"id": c.id, "verifiable": "NOT VERIFIABLE" if c.label == NOT_ENOUGH_INFO else "VERIFIABLE", "label": c.label,
             "claim": c.claim, "evidence": repr(list(c.evidence))} for c in _substitution_source() * 3]
    monkeypatch.setattr("training.fever.SWAP_FRACTION", 1.0)
    fever, swaps, half = _load_from_rows(tmp_path, monkeypatch, rows, "fever", "fever-swaps", "fever-swaps-half")
    # `fever-swaps-half` swaps half the SUPPORTS claims whatever SWAP_FRACTION is
    assert half.name == "fever-swaps-half" and half.dev == fever.dev
    assert 0 < len(half.train) - len(fever.train) < len(swaps.train) - len(fever.train)
    assert swaps.dev == fever.dev and swaps.test == fever.test
    assert swaps.train[: len(fever.train)] == fever.train  # the original claims' lists unchanged
    added = swaps.train[len(fever.train):]
    assert added and {e.label for e in added} == {"REFUTES"}
    assert {e.claim for e in added}.isdisjoint(e.claim for e in fever.train)


def test_view_metrics_on_hand_made_logits():
    import numpy as np

    from training.examples import ClaimExample

    labels = ["SUPPORTS", "REFUTES", NOT_ENOUGH_INFO]
    examples = [ClaimExample("a", ("x", "y"), "SUPPORTS", 1), ClaimExample("b", ("x", "y", "z"), "REFUTES", 0),
                ClaimExample("c", ("x",), "REFUTES", 0)]
    logits = np.asarray([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0], [1.0, 3.0, 0.0]])  # right, NEI (REFUTES over SUPPORTS), right
    scores = [np.asarray([0.1, 0.9]), np.asarray([0.2, 0.7, 0.1]), np.asarray([1.0])]
    out = view_metrics(examples, logits, labels, scores)
    assert out["accuracy"] == pytest.approx(2 / 3) and out["supports_vs_refutes"] == pytest.approx(2 / 3)
    assert out["supports_vs_refutes_two_way"] == 1.0 and out["refutes_recall"] == 0.5
    # balanced: the mean recall over the labels present (SUPPORTS 1, REFUTES 0.5; no NOT ENOUGH INFO)
    assert out["supports_recall"] == 1.0
    assert out["balanced_accuracy"] == pytest.approx(0.75) and out["supports_vs_refutes_balanced"] == pytest.approx(0.75)
    assert out["nei_recall"] is None  # no NOT ENOUGH INFO claim: no recall, not NaN (the report is JSON)
    # gold first among two or more sentences: claim a yes (1/2 chance), claim b no (1/3); c has one sentence
    assert (out["gold_first"], out["gold_first_claims"]) == (0.5, 2) and out["gold_first_chance"] == pytest.approx((1 / 2 + 1 / 3) / 2)


def test_the_substituted_view_is_the_swapped_supported_claims_with_their_gold_sentences():
    claims = [c for c in _substitution_source() if c.label != NOT_ENOUGH_INFO]
    views = evaluation_views(claims, build_evidence_lists(claims, seed=0, split="dev"), seed=0, split="dev", max_evidence=4)
    swaps = substitution_claims(claims, seed=0, fraction=1.0)
    assert [(e.claim, e.evidence, e.label) for e in views["substituted"]] == [(c.claim, c.evidence, "REFUTES") for c in swaps]
    assert all(e.gold_evidence == 0 for e in views["substituted"])  # one gold sentence each
    assert set(views) == {"gold", "gold+unrelated", "retrieved", "substituted"}
