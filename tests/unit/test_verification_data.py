"""The retrieval-based verification builder on small hand-made splits: distractors share words
with the claim but never come from the gold premise's image, near-copies of the gold premise and
premises SNLI pairs with the claim are left out, NOT ENOUGH INFO without the gold premise stays on
topic, gold_evidence points at the gold premise, and distractor lengths follow the gold premises'."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

import training.verification as verification
from training.examples import PairExample
from training.verification import NOT_ENOUGH_INFO, REFUTES, SUPPORTS, CaptionedPair, VerificationRecord, build_claims, sentence_length

SUBJECTS = ["dog", "man", "woman", "child", "girl", "boy"]
ACTIVITIES = ["plays with a ball", "rides a bicycle", "sings on a stage", "swims in a lake", "reads a newspaper", "cooks dinner"]
PLACES = ["in the park", "on the street"]
NEAR_COPY = "a DOG plays with a ball, in the park!"  # the same words as image 100's first caption
DECIDER = "A dog plays with a ball at night."  # SNLI-style pair: (DECIDER, "A dog plays with a ball.") = entailment


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"\b\w\w+\b", text.lower()) if w not in ENGLISH_STOP_WORDS}


def topic_pairs() -> list[CaptionedPair]:
    """36 images (subject x activity), two captions each, three hypotheses per caption; every
    claim shares its subject or activity with premises of ten other images. Plus a premise under
    two images' captionIDs, a near-copy of one caption under another image, and a premise whose
    own SNLI pair entails another image's claim."""
    pairs = []
    for s, subject in enumerate(SUBJECTS):
        for a, activity in enumerate(ACTIVITIES):
            image = f"{100 + 10 * s + a}.jpg"
            for c, place in enumerate(PLACES):
                premise, caption = f"A {subject} {activity} {place}.", f"{image}#{c}"
                pairs += [
                    CaptionedPair(PairExample(premise, f"A {subject} {activity}.", "entailment"), caption),
                    CaptionedPair(PairExample(premise, f"No {subject} {activity} {place}.", "contradiction"), caption),
                    CaptionedPair(PairExample(premise, f"A {subject} {activity} with a friend {place}.", "neutral"), caption),
                ]
    pairs += [
        CaptionedPair(PairExample("A man rides a bicycle on the street.", "Someone rides outside.", "entailment"), "900.jpg#0"),
        CaptionedPair(PairExample(NEAR_COPY, "A dog is happy.", "neutral"), "950.jpg#0"),
        CaptionedPair(PairExample(DECIDER, "A dog plays with a ball.", "entailment"), "960.jpg#0"),
    ]
    return pairs


def images_of_premise(pairs: list[CaptionedPair]) -> dict[str, set[str]]:
    images: dict[str, set[str]] = {}
    for p in pairs:
        images.setdefault(p.example.premise, set()).add(p.image_id)
    return images


def distractors(record: VerificationRecord) -> list[str]:
    return [s for i, s in enumerate(record.example.evidence) if i != record.example.gold_evidence]


def test_gold_evidence_labels_and_evidence_counts() -> None:
    pairs = topic_pairs()
    records = build_claims(pairs, seed=1, split="train", min_evidence=2, max_evidence=4)
    assert len(records) == len(pairs)
    expected = {"entailment": SUPPORTS, "contradiction": REFUTES, "neutral": NOT_ENOUGH_INFO}
    sizes: Counter = Counter()
    for record, pair in zip(records, pairs):
        claim = record.example
        assert record.source == pair and claim.claim == pair.example.hypothesis
        assert record.gold_index == claim.gold_evidence
        assert 2 <= len(claim.evidence) <= 4 and len(set(claim.evidence)) == len(claim.evidence)
        sizes[len(claim.evidence)] += 1
        if claim.gold_evidence is None:
            assert pair.example.label in ("entailment", "contradiction") and claim.label == NOT_ENOUGH_INFO
            assert pair.example.premise not in claim.evidence
        else:  # neutral keeps its premise, and its gold_evidence, too
            assert claim.evidence[claim.gold_evidence] == pair.example.premise
            assert claim.evidence.count(pair.example.premise) == 1
            assert claim.label == expected[pair.example.label]
    assert set(sizes) == {2, 3, 4}
    decisive = sum(p.example.label in ("entailment", "contradiction") for p in pairs)
    assert sum(r.example.gold_evidence is None for r in records) == round(0.2 * decisive)
    assert any(r.example.gold_evidence is not None and r.source.example.label == "neutral" for r in records)


def test_unknown_snli_label_is_refused() -> None:
    pairs = topic_pairs() + [CaptionedPair(PairExample("A cat.", "A pet.", "-"), "1.jpg#0")]
    with pytest.raises(ValueError, match="not one of"):
        build_claims(pairs, seed=0, split="train")


def test_same_seed_same_claims_other_seed_or_split_other_claims() -> None:
    pairs = topic_pairs()
    first = [r.example for r in build_claims(pairs, seed=5, split="dev")]
    assert first == [r.example for r in build_claims(list(pairs), seed=5, split="dev")]
    assert first != [r.example for r in build_claims(pairs, seed=6, split="dev")]
    assert first != [r.example for r in build_claims(pairs, seed=5, split="test")]
    # the chunking of the similarity products does not change the result
    assert first == [r.example for r in build_claims(pairs, seed=5, split="dev", chunk_size=7)]


def test_distractors_share_a_word_with_the_claim_and_never_come_from_the_gold_image() -> None:
    pairs = topic_pairs()
    images = images_of_premise(pairs)
    for seed in (0, 1, 2):
        for record in build_claims(pairs, seed=seed, split="train", min_evidence=3, max_evidence=5, random_fraction=0.0):
            gold, claim_words = record.source.example.premise, content_words(record.example.claim)
            for sentence in distractors(record):
                assert sentence != gold
                assert not images[sentence] & (images[gold] | {record.source.image_id})
                assert content_words(sentence) & claim_words, (record.example.claim, sentence)


def test_a_share_of_distractor_slots_holds_off_topic_premises_from_other_images() -> None:
    pairs = topic_pairs()
    images = images_of_premise(pairs)

    def off_topic_share(fraction: float) -> float:
        off, total = 0, 0
        for record in build_claims(pairs, seed=4, split="train", min_evidence=3, max_evidence=5, random_fraction=fraction):
            gold, claim_words = record.source.example.premise, content_words(record.example.claim)
            for sentence in distractors(record):
                assert sentence != gold and not images[sentence] & (images[gold] | {record.source.image_id})
                off += not content_words(sentence) & claim_words
                total += 1
        return off / total

    # retrieval alone never picks a premise without a claim word; random slots often do
    assert off_topic_share(0.0) == 0.0
    assert 0.05 < off_topic_share(0.25) < off_topic_share(1.0)
    with pytest.raises(ValueError, match="random_fraction"):
        build_claims(pairs, seed=0, split="train", random_fraction=1.5)


def test_claims_without_gold_get_on_topic_evidence() -> None:
    pairs = topic_pairs()
    records = build_claims(pairs, seed=3, split="train", no_gold_fraction=0.5, min_evidence=3, max_evidence=5, random_fraction=0.0)
    no_gold = [r for r in records if r.example.gold_evidence is None]
    assert len(no_gold) > 30
    all_premises = sorted({p.example.premise for p in pairs})
    for record in no_gold:
        claim_words = content_words(record.example.claim)
        assert all(content_words(s) & claim_words for s in record.example.evidence)
        # far above what premises picked at random would share with the claim
        shared = np.mean([len(content_words(s) & claim_words) for s in record.example.evidence])
        assert shared > np.mean([len(content_words(s) & claim_words) for s in all_premises])


def test_near_copies_of_the_gold_premise_and_premises_that_decide_the_claim_are_left_out() -> None:
    pairs = topic_pairs()
    gold = "A dog plays with a ball in the park."

    def uses(records, premise, claim=None):
        return sum(premise in distractors(r) for r in records if r.source.example.premise == gold and claim in (None, r.example.claim))

    kwargs = dict(split="train", min_evidence=5, max_evidence=5, candidates=8)
    default = [r for seed in range(6) for r in build_claims(pairs, seed=seed, **kwargs)]
    unfiltered = [r for seed in range(6) for r in build_claims(pairs, seed=seed, max_gold_similarity=2.0, **kwargs)]
    assert uses(default, NEAR_COPY) == 0
    assert uses(unfiltered, NEAR_COPY) > 0  # it is the claim's nearest premise when allowed
    # DECIDER entails "A dog plays with a ball." in the split itself: never its distractor ...
    claim = "A dog plays with a ball."
    assert uses(default, DECIDER, claim) == 0
    # ... while a neutral pair of the same texts does not keep it out
    neutral = pairs[:-1] + [CaptionedPair(PairExample(DECIDER, claim, "neutral"), "960.jpg#0")]
    assert sum(uses(build_claims(neutral, seed=seed, **kwargs), DECIDER, claim) for seed in range(6)) > 0


def length_world() -> list[CaptionedPair]:
    """Per subject: six long captions with three hypotheses each, and twelve short ones with one:
    gold premises are mostly long, while TF-IDF cosine prefers the short ones."""
    pairs = []
    for s, subject in enumerate(SUBJECTS):
        for a, activity in enumerate(ACTIVITIES):
            premise = f"A {subject} {activity} in the big green park while the sun shines over the quiet old town square."
            caption = f"{100 + 10 * s + a}.jpg#0"
            pairs += [
                CaptionedPair(PairExample(premise, f"A {subject} {activity}.", "entailment"), caption),
                CaptionedPair(PairExample(premise, f"No {subject} {activity} today.", "contradiction"), caption),
                CaptionedPair(PairExample(premise, f"A {subject} {activity} with a friend.", "neutral"), caption),
            ]
        for k in range(12):
            pairs.append(CaptionedPair(PairExample(f"A {subject} {ACTIVITIES[k % 6].split()[0]}{'!' * (k // 6)}", f"A {subject} moves {k}.", "neutral"), f"{500 + 20 * s + k}.jpg#0"))
    return pairs


def length_gold_correlation(records: list[VerificationRecord]) -> tuple[float, float]:
    is_gold, lengths = [], []
    for r in records:
        if r.example.gold_evidence is not None and len(r.example.evidence) > 1:
            for i, sentence in enumerate(r.example.evidence):
                is_gold.append(i == r.example.gold_evidence)
                lengths.append(sentence_length(sentence))
    is_gold, lengths = np.asarray(is_gold, dtype=float), np.asarray(lengths, dtype=float)
    return float(np.corrcoef(is_gold, lengths)[0, 1]), float(lengths[is_gold == 1].mean() - lengths[is_gold == 0].mean())


def test_distractor_lengths_follow_the_gold_premises(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = length_world()
    kwargs = dict(split="train", min_evidence=2, max_evidence=5, no_gold_fraction=0.0)
    balanced = [r for seed in range(3) for r in build_claims(pairs, seed=seed, **kwargs)]
    correlation, gap = length_gold_correlation(balanced)
    assert abs(correlation) < 0.1 and abs(gap) < 1.5, (correlation, gap)
    monkeypatch.setattr(verification, "BALANCE_ROUNDS", 0)  # plain uniform sampling among the candidates
    unbalanced = [r for seed in range(3) for r in build_claims(pairs, seed=seed, **kwargs)]
    correlation, gap = length_gold_correlation(unbalanced)
    assert correlation > 0.3 and gap > 4, (correlation, gap)
