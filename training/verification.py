"""Claim verification data derived from SNLI (not FEVER): a deterministic builder.

Each SNLI pair becomes one claim:

    claim     = the hypothesis
    evidence  = K sentences, K drawn uniformly from [min_evidence, max_evidence] (1..5): the gold
                premise plus K-1 distractor premises, in random order
    label     = SUPPORTS (entailment), REFUTES (contradiction), NOT ENOUGH INFO (neutral)
    gold_evidence = the gold premise's index in evidence (set for neutral claims too: the
                premise is still the sentence the claim is about)

and a fixed fraction (`no_gold_fraction`, 20 %) of the entailment and contradiction pairs,
chosen by the seeded generator, lose their gold premise: their evidence is K distractors, their
label NOT ENOUGH INFO and their gold_evidence None. Because the distractors are on topic (below),
NOT ENOUGH INFO means "about the claim's words, but does not decide it", not "nothing on topic".

Distractors are retrieved, not random, so that sharing words with the claim does not single out
the gold premise:

  * TF-IDF (scikit-learn, lowercased unigrams, English stop words removed) fitted on the split's
    distinct premises; each claim's cosine similarity to every premise is a sparse product,
    `chunk_size` claims at a time, and the `candidates` (M = 30) most similar premises with a
    positive score are kept (argpartition).
  * Never from the gold premise's image: SNLI's Flickr30k images have five captions each, and a
    sibling caption could itself support the claim, which would make NOT ENOUGH INFO wrong. The
    image is the captionID before "#" (the whole id for captions without one, e.g. SNLI's
    "vg_len..." ones); a premise found under several images bans all of them.
  * Not a near-copy of the gold premise (TF-IDF cosine above `max_gold_similarity`, 0.7), and not
    a premise that SNLI itself pairs with the same hypothesis text as entailment or
    contradiction: either would decide the claim too.
  * The K-1 (or K) distractors are sampled from the remaining candidates without replacement,
    weighted so that two features of the chosen distractors follow their distribution over the
    gold premises: sentence length in words, and content words shared with the claim. Cosine
    similarity favours short premises, and the claim was written from its gold premise: sampled
    uniformly, distractors run 1.3 words shorter than gold premises, and on the test split's
    lists of 2-5 sentences "the longest sentence" finds the gold premise in 39 % and "the one
    sharing the most words with the claim" in 47 % (chance 32 %); weighted, 32 % and 37 %. One
    weight factor per feature value, fitted over the whole split by a few rounds of raking
    (target / realised histogram).
  * Claims with too few candidates (no content word shared with enough premises) are topped up
    with random premises from other images, as the builder did before retrieval.
  * And `random_fraction` (25 %) of the distractor slots, drawn per slot, hold a random premise
    from another image instead: real evidence lists mix on-topic and off-topic sentences, and a
    model that never saw an off-topic one reads "a different scene" as refuting (SNLI labels an
    unrelated scene a contradiction), so one unrelated sentence beside a supporting one turned
    SUPPORTS into REFUTES.

Known limit: a retrieved premise from another image can still support or refute a generic claim
("A man is outside."), so some labels are noisy, most of all NOT ENOUGH INFO without the gold
premise: on the test split 7.7 % of distractors hold every content word of their claim (9 % of
gold premises do). tools/verification_shortcuts.py measures this and the shortcuts
(claim-only, shortest/longest/most-overlap sentence, length correlation).

Deterministic: one `random.Random` per split, seeded from a string (seeding from a str hashes
it with SHA-512, so PYTHONHASHSEED does not matter), iterating lists only (never sets); numpy's
generator is seeded from it, and the retrieval is plain sparse arithmetic.
"""

from __future__ import annotations

import logging
import random
import re
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from training.examples import ClaimExample, PairExample

logger = logging.getLogger(__name__)

SUPPORTS, REFUTES, NOT_ENOUGH_INFO = "SUPPORTS", "REFUTES", "NOT ENOUGH INFO"
VERIFICATION_LABELS = [SUPPORTS, REFUTES, NOT_ENOUGH_INFO]
LABEL_OF_SNLI = {"entailment": SUPPORTS, "contradiction": REFUTES, "neutral": NOT_ENOUGH_INFO}
NO_GOLD_FRACTION = 0.2
MIN_EVIDENCE, MAX_EVIDENCE = 1, 5
CANDIDATES = 30  # M: distractors are sampled from this many most similar premises
MAX_GOLD_SIMILARITY = 0.7  # TF-IDF cosine to the gold premise above which a candidate is a near-copy
RANDOM_FRACTION = 0.25  # share of distractor slots filled with a random premise from another image
CHUNK_SIZE = 1000  # claims per sparse product (1,000 x ~26k premises: ~100 MB of float32 scores)
BALANCE_ROUNDS = 4  # rounds of fitting the sampling weights
_MAX_LENGTH = 40  # sentence lengths (words) are balanced in bins 0..39 and 40 or more
_MAX_OVERLAP = 4  # content words shared with the claim: 0..3 and 4 or more
_WORD = re.compile(r"\w+")
_DECISIVE = ("entailment", "contradiction")


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
    gold_index: int | None  # position of the gold premise in evidence (= example.gold_evidence); None if left out
    source: CaptionedPair


def sentence_length(text: str) -> int:
    """Words in a sentence (runs of \\w), the length the builder balances."""
    return len(_WORD.findall(text))


def build_claims(
    pairs: Sequence[CaptionedPair],
    seed: int,
    split: str,
    no_gold_fraction: float = NO_GOLD_FRACTION,
    min_evidence: int = MIN_EVIDENCE,
    max_evidence: int = MAX_EVIDENCE,
    *,
    candidates: int = CANDIDATES,
    max_gold_similarity: float = MAX_GOLD_SIMILARITY,
    chunk_size: int = CHUNK_SIZE,
    random_fraction: float = RANDOM_FRACTION,
) -> list[VerificationRecord]:
    """One claim per pair, in the pairs' order. `split` names the split so that train, dev and
    test draw from different streams of the same seed. See the module docstring for how the
    distractors are chosen."""
    if not 1 <= min_evidence <= max_evidence:
        raise ValueError(f"need 1 <= min_evidence <= max_evidence, got {min_evidence}, {max_evidence}")
    if not 0.0 <= no_gold_fraction <= 1.0:
        raise ValueError(f"no_gold_fraction must be in [0, 1], got {no_gold_fraction}")
    if not 0.0 <= random_fraction <= 1.0:
        raise ValueError(f"random_fraction must be in [0, 1], got {random_fraction}")
    if candidates < 1 or chunk_size < 1:
        raise ValueError(f"candidates and chunk_size must be >= 1, got {candidates}, {chunk_size}")
    labels = []
    for i, pair in enumerate(pairs):
        try:
            labels.append(LABEL_OF_SNLI[pair.example.label])
        except KeyError:
            raise ValueError(f"pair {i}: SNLI label {pair.example.label!r} is not one of {sorted(LABEL_OF_SNLI)}") from None
    started = time.perf_counter()
    rng = random.Random(f"snli-verification:{seed}:{split}")
    pool = _Premises(pairs)

    decisive = [i for i, pair in enumerate(pairs) if pair.example.label in _DECISIVE]
    no_gold = set(rng.sample(decisive, round(no_gold_fraction * len(decisive))))
    keep_gold = np.asarray([i not in no_gold for i in range(len(pairs))], dtype=bool)
    sizes = np.asarray([rng.randint(min_evidence, max_evidence) for _ in pairs], dtype=np.int64)
    counts = sizes - keep_gold  # distractors per claim

    cand, valid, overlap, gold_overlap = _retrieve(pool, [pair.example.hypothesis for pair in pairs], candidates, max_gold_similarity, chunk_size)
    lengths = np.minimum([sentence_length(text) for text in pool.texts], _MAX_LENGTH).astype(np.int64)
    kept = keep_gold.nonzero()[0]  # the gold premises the distractors will stand next to
    generator = np.random.default_rng(rng.getrandbits(64))
    chosen = _balanced_sample(
        [lengths[cand], np.minimum(overlap, _MAX_OVERLAP)],
        [lengths[pool.gold[kept]], np.minimum(gold_overlap[kept], _MAX_OVERLAP)],
        valid, counts, generator,
    )

    records = []
    topped_up = 0
    for i, pair in enumerate(pairs):
        retrieved = [int(q) for q in cand[i][chosen[i]]]
        if len(retrieved) < counts[i]:
            topped_up += 1
        off_topic = sum(rng.random() < random_fraction for _ in range(int(counts[i])))
        picked = retrieved[: int(counts[i]) - off_topic]
        if len(picked) < counts[i]:
            picked += _random_distractors(rng, pool, i, picked, int(counts[i]) - len(picked), max_gold_similarity)
        evidence = [pool.texts[q] for q in picked]
        gold_text = pair.example.premise
        if keep_gold[i]:
            evidence.append(gold_text)
        rng.shuffle(evidence)
        gold_index = evidence.index(gold_text) if keep_gold[i] else None
        label = labels[i] if keep_gold[i] else NOT_ENOUGH_INFO
        records.append(VerificationRecord(ClaimExample(pair.example.hypothesis, tuple(evidence), label, gold_index), gold_index, pair))
    seconds = time.perf_counter() - started
    logger.info(
        "built %d %s claims in %.1f s (%d without their gold premise, %d topped up with random premises)",
        len(records), split, seconds, len(no_gold), topped_up,
        extra={"split": split, "claims": len(records), "no_gold": len(no_gold), "topped_up": topped_up, "seed": seed, "seconds": round(seconds, 2)},
    )
    return records


class _Premises:
    """A split's distinct premises (first-seen order), their images, and for each pair what may
    not be its distractor: premises of the gold premise's images, and premises SNLI pairs with
    the same hypothesis as entailment or contradiction."""

    def __init__(self, pairs: Sequence[CaptionedPair]) -> None:
        self.texts: list[str] = []
        index: dict[str, int] = {}
        images_of: list[dict[str, None]] = []  # insertion-ordered sets
        members: dict[str, dict[int, None]] = {}
        deciding: dict[str, dict[int, None]] = {}
        gold = []
        for pair in pairs:
            text = pair.example.premise
            p = index.get(text)
            if p is None:
                p = index[text] = len(self.texts)
                self.texts.append(text)
                images_of.append({})
            gold.append(p)
            images_of[p][pair.image_id] = None
            members.setdefault(pair.image_id, {})[p] = None
            if pair.example.label in _DECISIVE:
                deciding.setdefault(pair.example.hypothesis, {})[p] = None
        self.gold = np.asarray(gold, dtype=np.int64)
        self._images_of = images_of
        self._members = members
        self._hypotheses = [pair.example.hypothesis for pair in pairs]
        self._deciding = deciding
        self._banned: dict[int, list[int]] = {}
        self.vectors = None  # TF-IDF rows (L2-normalised) once retrieval has fitted them

    def similarity(self, p: int, q: int) -> float:
        """TF-IDF cosine of two premises (0 without a fitted vocabulary)."""
        if self.vectors is None:
            return 0.0
        return float(self.vectors[p].multiply(self.vectors[q]).sum())

    def excluded(self, i: int) -> list[int]:
        """Premises pair i may not take as distractors (its gold premise included), sorted."""
        p = int(self.gold[i])
        banned = self._banned.get(p)
        if banned is None:
            banned = self._banned[p] = sorted({q for image in self._images_of[p] for q in self._members[image]})
        deciding = self._deciding.get(self._hypotheses[i])
        if deciding and (len(deciding) > 1 or p not in deciding):
            return sorted(set(banned).union(deciding))
        return banned


def _retrieve(pool: _Premises, claims: list[str], candidates: int, max_gold_similarity: float, chunk_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per claim, the `candidates` premises most similar to it by TF-IDF cosine (sorted by
    premise index); whether each may be used (positive similarity, not excluded, not a near-copy
    of the gold premise); how many of the claim's content words (the TF-IDF vocabulary) each
    holds; and how many the gold premise holds."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    n, total = len(claims), len(pool.texts)
    m = min(candidates, total)
    vectorizer = TfidfVectorizer(lowercase=True, stop_words="english", dtype=np.float32)
    try:
        premise_vectors = vectorizer.fit_transform(pool.texts).tocsr()
    except ValueError:  # empty vocabulary: the premises hold stop words only; nothing to retrieve
        empty = np.zeros((n, 0), dtype=np.int64)
        return empty, empty.astype(bool), empty, np.zeros(n, dtype=np.int64)
    pool.vectors = premise_vectors
    claim_vectors = vectorizer.transform(claims).tocsr()
    premise_words, claim_words = (premise_vectors > 0).astype(np.float32), (claim_vectors > 0).astype(np.float32)
    gold_overlap = np.asarray(premise_words[pool.gold].multiply(claim_words).sum(axis=1)).ravel().astype(np.int64)
    premises_t = premise_vectors.T.tocsr()
    cand = np.empty((n, m), dtype=np.int64)
    valid = np.empty((n, m), dtype=bool)
    overlap = np.empty((n, m), dtype=np.int64)
    for start in range(0, n, chunk_size):
        stop = min(n, start + chunk_size)
        # negated cosines, (chunk, premises): numpy's introselect is ~10x slower picking the
        # largest of rows that are mostly tied zeros than picking the smallest
        negated = (claim_vectors[start:stop] @ premises_t).toarray()
        np.negative(negated, out=negated)
        excluded = [pool.excluded(i) for i in range(start, stop)]
        rows = np.repeat(np.arange(stop - start), [len(e) for e in excluded])
        negated[rows, np.concatenate(excluded).astype(np.int64)] = np.inf
        top = np.argpartition(negated, m - 1, axis=1)[:, :m] if m < total else np.tile(np.arange(total), (stop - start, 1))
        top.sort(axis=1)  # independent of argpartition's internal order
        ok = np.take_along_axis(negated, top, axis=1) < 0
        flat, owners = top.ravel(), np.repeat(np.arange(start, stop), m)
        to_gold = np.asarray(premise_vectors[flat].multiply(premise_vectors[pool.gold[owners]]).sum(axis=1)).reshape(-1, m)
        cand[start:stop] = top
        valid[start:stop] = ok & (to_gold <= max_gold_similarity)
        overlap[start:stop] = np.asarray(premise_words[flat].multiply(claim_words[owners]).sum(axis=1)).reshape(-1, m)
    return cand, valid, overlap, gold_overlap


def _balanced_sample(
    cand_features: Sequence[np.ndarray], gold_features: Sequence[np.ndarray], valid: np.ndarray, counts: np.ndarray, generator: np.random.Generator
) -> np.ndarray:
    """Which candidates each claim takes: `counts[i]` of its valid ones (fewer if it has fewer),
    without replacement (exponential keys: the largest log(u) / w win), with weight w = the
    product of one weight per feature value (sentence length, words shared with the claim),
    fitted by raking so that each feature's distribution over the chosen distractors follows
    its distribution over the gold premises. One factor per feature, not one per combination:
    a combination no distractor can have (all the claim's words AND long) would otherwise stop
    the single features from matching. The uniforms are drawn once, so fitting is deterministic."""
    if valid.shape[1] == 0:
        return np.zeros(valid.shape, dtype=bool)
    rounds = BALANCE_ROUNDS if all(len(g) for g in gold_features) else 0  # no gold premise kept: nothing to follow
    log_u = np.log1p(-generator.random(valid.shape))  # log of a uniform in (0, 1]
    positions = np.broadcast_to(np.arange(valid.shape[1]), valid.shape)
    sizes = [int(max(c.max(), g.max(initial=0))) + 1 for c, g in zip(cand_features, gold_features)]
    targets = [np.bincount(g, minlength=size) / max(1, len(g)) for g, size in zip(gold_features, sizes)]
    factors = [np.ones(size) for size in sizes]

    def choose() -> np.ndarray:
        weights = np.ones(valid.shape)
        for factor, values in zip(factors, cand_features):
            weights *= factor[values]
        keys = np.where(valid, log_u / weights, -np.inf)
        order = np.argsort(-keys, axis=1, kind="stable")
        ranks = np.empty_like(order)
        np.put_along_axis(ranks, order, positions, axis=1)
        return valid & (ranks < counts[:, None])

    chosen = choose()
    for _ in range(rounds):
        for f, values in enumerate(cand_features):
            realised = np.bincount(values[chosen], minlength=sizes[f]) / max(1, int(chosen.sum()))
            factors[f] = np.clip(factors[f] * (targets[f] + 1e-4) / (realised + 1e-4), 1e-3, 1e3)
            chosen = choose()
    return chosen


def _random_distractors(rng: random.Random, pool: _Premises, i: int, chosen: list[int], count: int, max_gold_similarity: float) -> list[int]:
    """`count` more distinct premises that pair i may use, uniformly at random (rejection
    sampling; near-copies of the gold premise refused too): for claims that share words with too
    few premises."""
    gold = int(pool.gold[i])
    excluded = set(pool.excluded(i)).union(chosen)
    picked: list[int] = []
    for _ in range(100 * (count + 1)):
        if len(picked) == count:
            break
        candidate = rng.randrange(len(pool.texts))
        if candidate not in excluded:
            excluded.add(candidate)
            if pool.similarity(gold, candidate) <= max_gold_similarity:
                picked.append(candidate)
    if len(picked) == count:
        return picked
    raise ValueError(f"could not find {count} distractor premises from other images for {pool.texts[gold]!r}: the split is too small")


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
    "sentence_length",
]
