"""Claim verification data derived from SNLI (not FEVER): a deterministic builder.

Each SNLI pair becomes one claim:

    claim     = the hypothesis
    evidence  = K sentences, K drawn uniformly from [min_evidence, max_evidence] (1..5): the gold
                premise plus K-1 distractor premises, in random order
    label     = SUPPORTS (entailment), REFUTES (contradiction), NOT ENOUGH INFO (neutral)

and a fixed fraction (`no_gold_fraction`, 20 %) of the entailment and contradiction pairs,
chosen by the seeded generator, lose their gold premise: their evidence is K distractors and
their label NOT ENOUGH INFO, so a network must check that the evidence bears on the claim.

Distractors are premises of the same split from other captions AND other images: SNLI's
Flickr30k images have five captions each, and a sibling caption of the gold premise's image
could itself support the claim, which would make a NOT ENOUGH INFO label wrong. The image is
the captionID before "#" (the whole id for captions without one, e.g. SNLI's "vg_len..." ones).

Deterministic: one `random.Random` per split, seeded from a string (seeding from a str hashes
it with SHA-512, so PYTHONHASHSEED does not matter), iterating lists only (never sets).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Sequence

from training.examples import ClaimExample, PairExample

logger = logging.getLogger(__name__)

SUPPORTS, REFUTES, NOT_ENOUGH_INFO = "SUPPORTS", "REFUTES", "NOT ENOUGH INFO"
VERIFICATION_LABELS = [SUPPORTS, REFUTES, NOT_ENOUGH_INFO]
LABEL_OF_SNLI = {"entailment": SUPPORTS, "contradiction": REFUTES, "neutral": NOT_ENOUGH_INFO}
NO_GOLD_FRACTION = 0.2
MIN_EVIDENCE, MAX_EVIDENCE = 1, 5


@dataclass(frozen=True)
class CaptionedPair:
    """An SNLI pair and the captionID of its premise."""

    example: PairExample
    caption_id: str

    @property
    def image_id(self) -> str:
        return self.caption_id.split("#", 1)[0]


@dataclass(frozen=True)
class VerificationRecord:
    """A built claim and how it was built (for tests and statistics)."""

    example: ClaimExample
    gold_index: int | None  # position of the gold premise in evidence; None if left out
    source: CaptionedPair


def build_claims(
    pairs: Sequence[CaptionedPair],
    seed: int,
    split: str,
    no_gold_fraction: float = NO_GOLD_FRACTION,
    min_evidence: int = MIN_EVIDENCE,
    max_evidence: int = MAX_EVIDENCE,
) -> list[VerificationRecord]:
    """One claim per pair, in the pairs' order. `split` names the split so that train, dev and
    test draw from different streams of the same seed."""
    if not 1 <= min_evidence <= max_evidence:
        raise ValueError(f"need 1 <= min_evidence <= max_evidence, got {min_evidence}, {max_evidence}")
    if not 0.0 <= no_gold_fraction <= 1.0:
        raise ValueError(f"no_gold_fraction must be in [0, 1], got {no_gold_fraction}")
    rng = random.Random(f"snli-verification:{seed}:{split}")

    # Distinct premises in first-seen order, with the images they come from.
    premises: list[str] = []
    premise_images: dict[str, set[str]] = {}
    for pair in pairs:
        text = pair.example.premise
        if text not in premise_images:
            premises.append(text)
            premise_images[text] = set()
        premise_images[text].add(pair.image_id)

    decisive = [i for i, pair in enumerate(pairs) if pair.example.label in ("entailment", "contradiction")]
    no_gold = set(rng.sample(decisive, round(no_gold_fraction * len(decisive))))

    records = []
    for i, pair in enumerate(pairs):
        try:
            label = LABEL_OF_SNLI[pair.example.label]
        except KeyError:
            raise ValueError(f"pair {i}: SNLI label {pair.example.label!r} is not one of {sorted(LABEL_OF_SNLI)}") from None
        k = rng.randint(min_evidence, max_evidence)
        keep_gold = i not in no_gold
        distractors = _distractors(rng, premises, premise_images, pair, k - 1 if keep_gold else k)
        evidence = distractors + [pair.example.premise] if keep_gold else distractors
        rng.shuffle(evidence)
        gold_index = evidence.index(pair.example.premise) if keep_gold else None
        records.append(
            VerificationRecord(
                ClaimExample(pair.example.hypothesis, tuple(evidence), label if keep_gold else NOT_ENOUGH_INFO),
                gold_index,
                pair,
            )
        )
    logger.info(
        "built %d %s claims (%d without their gold premise)", len(records), split, len(no_gold),
        extra={"split": split, "claims": len(records), "no_gold": len(no_gold), "seed": seed},
    )
    return records


def _distractors(
    rng: random.Random, premises: list[str], premise_images: dict[str, set[str]], pair: CaptionedPair, count: int
) -> list[str]:
    """`count` distinct premises whose images differ from the gold premise's (rejection
    sampling: almost every draw is accepted on a real split)."""
    gold = pair.example.premise
    banned_images = premise_images[gold] | {pair.image_id}
    chosen: list[str] = []
    for _ in range(100 * (count + 1)):
        if len(chosen) == count:
            return chosen
        candidate = premises[rng.randrange(len(premises))]
        if candidate != gold and candidate not in chosen and not (premise_images[candidate] & banned_images):
            chosen.append(candidate)
    if len(chosen) == count:
        return chosen
    raise ValueError(f"could not find {count} distractor premises from other images for {gold!r}: the split is too small")


def claims_of(records: Sequence[VerificationRecord]) -> list[ClaimExample]:
    return [record.example for record in records]


__all__ = [
    "CaptionedPair",
    "LABEL_OF_SNLI",
    "NOT_ENOUGH_INFO",
    "REFUTES",
    "SUPPORTS",
    "VERIFICATION_LABELS",
    "VerificationRecord",
    "build_claims",
    "claims_of",
]
