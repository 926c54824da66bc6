"""FEVER claim verification data (Thorne et al. 2018): the FEVER 1.0 train claims with the text
of their gold evidence sentences (`<benchmark dir>/fever/train.csv.xz`, its SOURCE.md), turned
into evidence lists that look like what a retriever hands a user, and into entailment pairs.

Reading (training.readers.iter_fever_csv): the evidence column is a Python list literal of
sentences in the FEVER dump's tokenization, made plain text (`detokenize_fever`); a claim's
sentences are deduplicated in order (the column concatenates every annotated evidence set, so a
sentence can appear twice). SUPPORTS / REFUTES rows without evidence (the page was missing from
the dump) are dropped and counted.

Splits (`split_fever`): train / dev / test with the claims made from one fact (the same first
evidence sentence) on the same side (training.datasets.group_split); NOT ENOUGH INFO claims have
no sentence and are grouped by their own normalised text.

Evidence lists (`build_evidence_lists`), per split, from that split's own sentence pool only:

  SUPPORTS / REFUTES  the gold sentences (all of them, up to `max_evidence`, a random subset of
                      that many when there are more) plus 0-3 distractors (0 with probability
                      `gold_only_fraction`), every sentence in a random position;
  NOT ENOUGH INFO     1-4 sentences that do not settle the claim: the nearest sentences of the
                      pool by TF-IDF cosine (on topic: the same names and words), and in a share
                      `unrelated_nei_fraction` of claims only unrelated random sentences.

A distractor slot holds a random (off-topic) sentence with probability `off_topic_fraction`, else
a retrieved one. Retrieved candidates never come from the claim's own fact group (sentences that
are gold evidence of a claim sharing a sentence with it), so a distractor does not repeat the
evidence; it may still be about the same page, which is the point: a sentence about something
else changes nothing. `gold_evidence` is the gold sentence's position when the claim has exactly
one gold sentence (the auxiliary evidence loss's target), else None.

Deterministic: one random.Random per split seeded from a string; the retrieval is sparse
arithmetic over lists in file order.
"""

from __future__ import annotations

import logging
import random
import re
import time
import unicodedata
from typing import Sequence

import numpy as np

from training.examples import ClaimExample, PairExample
from training.splits import group_split
from training.readers import NOT_ENOUGH_INFO, REFUTES, SUPPORTS, FeverClaim, detokenize_fever, read_fever  # noqa: F401  (the FEVER file format)

logger = logging.getLogger(__name__)

FEVER_LABELS = [SUPPORTS, REFUTES, NOT_ENOUGH_INFO]
ENTAILMENT_OF_FEVER = {SUPPORTS: "entailment", REFUTES: "contradiction", NOT_ENOUGH_INFO: "neutral"}
FEVER_FILE = "fever/train.csv.xz"

DEV_FRACTION = TEST_FRACTION = 0.04  # of the fact groups: ~5,500 claims each
MAX_EVIDENCE = 16  # the bundles' max_evidence: 99.4% of FEVER claims have at most 16 gold sentences (95.1% at most 5)
CANDIDATES = 20  # retrieved sentences a claim's on-topic distractors are drawn from
CHUNK_SIZE = 2000  # claims per sparse product
GOLD_ONLY_FRACTION = 0.3  # SUPPORTS / REFUTES claims that get no distractor
OFF_TOPIC_FRACTION = 0.3  # distractor slots that hold a random sentence instead of a retrieved one
UNRELATED_NEI_FRACTION = 0.3  # NOT ENOUGH INFO claims whose sentences are all random
MAX_DISTRACTORS = 3
MAX_NEI_SENTENCES = 4
NLI_MAX_PREMISE_SENTENCES = 3  # entailment pairs: gold sentences joined into one premise, at most this many

def normalized_claim(text: str) -> str:
    """Group key for claims without evidence: case, accents' composition and punctuation ignored."""
    return re.sub(r"\W+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()


def split_fever(claims: Sequence[FeverClaim], seed: int, dev_fraction: float = DEV_FRACTION,
                test_fraction: float = TEST_FRACTION) -> tuple[list[FeverClaim], list[FeverClaim], list[FeverClaim]]:
    """(train, dev, test): claims made from one fact (the same first evidence sentence) stay on
    one side. Grouping by every shared sentence instead joins most verifiable claims into one
    component (popular sentences chain them), which leaves dev almost without them."""
    keys = [[("sentence", c.evidence[0])] if c.evidence else [("claim", normalized_claim(c.claim))] for c in claims]
    rest, test_idx = group_split(keys, test_fraction, seed)
    rest_keys = [keys[i] for i in rest]
    train_local, dev_local = group_split(rest_keys, dev_fraction / (1.0 - test_fraction), seed + 1)
    return [claims[rest[i]] for i in train_local], [claims[rest[i]] for i in dev_local], [claims[i] for i in test_idx]


class SentencePool:
    """A split's distinct evidence sentences, each sentence's fact group (claims sharing
    sentences are one group), and TF-IDF retrieval of the sentences nearest to a claim."""

    def __init__(self, claims: Sequence[FeverClaim]) -> None:
        self.texts: list[str] = []
        index: dict[str, int] = {}
        for claim in claims:
            for sentence in claim.evidence:
                if sentence not in index:
                    index[sentence] = len(self.texts)
                    self.texts.append(sentence)
        self.index = index
        # union-find over sentences: a claim's sentences are one group
        parent = list(range(len(self.texts)))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for claim in claims:
            ids = [index[s] for s in claim.evidence]
            for other in ids[1:]:
                a, b = find(ids[0]), find(other)
                if a != b:
                    parent[b] = a
        self.group = np.asarray([find(i) for i in range(len(self.texts))], dtype=np.int64)

    def retrieve(self, claims: Sequence[FeverClaim], candidates: int = CANDIDATES, chunk_size: int = CHUNK_SIZE) -> list[list[int]]:
        """Per claim, up to `candidates` pool sentences by decreasing TF-IDF cosine to the claim
        (ties by index), with a positive score and outside the claim's own fact group."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        if not self.texts:
            return [[] for _ in claims]
        vectorizer = TfidfVectorizer(lowercase=True, stop_words="english", dtype=np.float32)
        pool_t = vectorizer.fit_transform(self.texts).T.tocsr()
        queries = vectorizer.transform([c.claim for c in claims]).tocsr()
        m = min(candidates + MAX_EVIDENCE, len(self.texts))  # room for the own-group ones dropped below
        out: list[list[int]] = []
        for start in range(0, len(claims), chunk_size):
            scores = (queries[start : start + chunk_size] @ pool_t).toarray()  # (chunk, pool)
            np.negative(scores, out=scores)
            top = np.argpartition(scores, m - 1, axis=1)[:, :m] if m < len(self.texts) else np.tile(np.arange(len(self.texts)), (len(scores), 1))
            for row, claim in enumerate(claims[start : start + chunk_size]):
                order = sorted(top[row].tolist(), key=lambda q: (scores[row, q], q))
                own = {int(self.group[self.index[s]]) for s in claim.evidence}
                out.append([q for q in order if scores[row, q] < 0 and int(self.group[q]) not in own][:candidates])
        return out


def build_evidence_lists(
    claims: Sequence[FeverClaim],
    seed: int,
    split: str,
    max_evidence: int = MAX_EVIDENCE,
    *,
    gold_only_fraction: float = GOLD_ONLY_FRACTION,
    off_topic_fraction: float = OFF_TOPIC_FRACTION,
    unrelated_nei_fraction: float = UNRELATED_NEI_FRACTION,
    candidates: int = CANDIDATES,
) -> list[ClaimExample]:
    """One verification example per claim, in the claims' order (module docstring)."""
    started = time.perf_counter()
    rng = random.Random(f"fever:{seed}:{split}")
    pool = SentencePool(claims)
    if not pool.texts:
        raise ValueError(f"{split}: no evidence sentences to draw distractors from")
    retrieved = pool.retrieve(claims, candidates)

    def off_topic(claim: FeverClaim, taken: set[int]) -> int | None:
        own = {int(pool.group[pool.index[s]]) for s in claim.evidence}
        for _ in range(50):
            q = rng.randrange(len(pool.texts))
            if q not in taken and int(pool.group[q]) not in own:
                return q
        return None

    def distractors(i: int, claim: FeverClaim, count: int, off_share: float) -> list[str]:
        near = list(retrieved[i])
        taken: set[int] = set()
        for _ in range(count):
            q = None
            if near and rng.random() >= off_share:
                q = near.pop(rng.randrange(min(len(near), 5)))  # one of the five nearest left
            if q is None or q in taken:
                q = off_topic(claim, taken)
            if q is not None:
                taken.add(q)
        return [pool.texts[q] for q in taken]

    examples = []
    for i, claim in enumerate(claims):
        if claim.label == NOT_ENOUGH_INFO:
            count = rng.randint(1, MAX_NEI_SENTENCES)
            share = 1.0 if rng.random() < unrelated_nei_fraction else off_topic_fraction
            evidence = distractors(i, claim, min(count, max_evidence), share)
            rng.shuffle(evidence)
            examples.append(ClaimExample(claim.claim, tuple(evidence), claim.label, None))
            continue
        gold = list(claim.evidence)
        if len(gold) > max_evidence:
            gold = [gold[k] for k in sorted(rng.sample(range(len(gold)), max_evidence))]
        room = max_evidence - len(gold)
        count = 0 if rng.random() < gold_only_fraction else rng.randint(1, MAX_DISTRACTORS)
        evidence = gold + distractors(i, claim, min(count, room), off_topic_fraction)
        rng.shuffle(evidence)
        gold_index = evidence.index(gold[0]) if len(gold) == 1 else None
        examples.append(ClaimExample(claim.claim, tuple(evidence), claim.label, gold_index))
    seconds = time.perf_counter() - started
    logger.info("built %d %s FEVER evidence lists in %.1f s", len(examples), split, seconds,
                extra={"split": split, "claims": len(examples), "pool": len(pool.texts), "seconds": round(seconds, 2)})
    return examples


def entailment_pairs(claims: Sequence[FeverClaim], examples: Sequence[ClaimExample], seed: int, split: str) -> list[PairExample]:
    """FEVER as entailment pairs, one per claim: hypothesis = the claim; premise = its gold
    sentences joined (at most NLI_MAX_PREMISE_SENTENCES) for SUPPORTS (entailment) and REFUTES
    (contradiction), or one or two of the sentences `build_evidence_lists` gave a NOT ENOUGH INFO
    claim (neutral: retrieved on-topic sentences that do not settle it, or unrelated ones)."""
    rng = random.Random(f"fever-nli:{seed}:{split}")
    pairs = []
    for claim, example in zip(claims, examples, strict=True):
        if claim.label == NOT_ENOUGH_INFO:
            sentences = list(example.evidence[: rng.randint(1, 2)])
        else:
            sentences = list(claim.evidence[:NLI_MAX_PREMISE_SENTENCES])
        pairs.append(PairExample(" ".join(sentences), claim.claim, ENTAILMENT_OF_FEVER[claim.label]))
    return pairs


# --- substitution claims (the `fever-swaps` dataset) --------------------------------------------

SWAP_FRACTION = 0.15  # of the train SUPPORTS claims that also give one substituted REFUTES claim
_NAME = re.compile(r"[A-Z][\w'\-]*(?: [A-Z][\w'\-]*)*")  # a run of capitalised words
_YEAR = re.compile(r"\b(?:1[5-9]\d\d|20[0-2]\d)\b")
_TITLE_WORDS = {"of", "the", "a", "an", "on", "in", "and", "for", "to", "de", "&"}  # inside a name ("Cat on a Hot Tin Roof")


def _swappable_spans(claim: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of the claim's years, and of its names after its subject (the words
    before its first lowercase word that cannot be part of a title): the parts a FEVER annotator
    substituted ("Paris is the capital of France" -> "... of Germany")."""
    subject_end = len(claim)
    for m in re.finditer(r"\S+", claim):
        word = m.group()
        if word[0].islower() and word.casefold() not in _TITLE_WORDS:
            subject_end = m.start()
            break
    spans = [(m.start(), m.end(), "year") for m in _YEAR.finditer(claim)]
    spans += [(m.start(), m.end(), "name") for m in _NAME.finditer(claim) if m.start() >= subject_end]
    return spans


def _contexts(claim: str, start: int, words: int) -> list[tuple]:
    """Pool keys of a name span, most specific first: the two words before it, the one word
    before it, only its length in words; each with the length."""
    before = claim[:start].casefold().split()
    return [("2", *before[-2:], words), ("1", *before[-1:], words), ("0", words)]


def substitution_claims(claims: Sequence[FeverClaim], seed: int, fraction: float = SWAP_FRACTION,
                        min_pool: int = 20) -> list[FeverClaim]:
    """REFUTES claims made from a `fraction` of the SUPPORTS claims, FEVER's own "substitution"
    mutation: one name after the claim's subject, or one year (_swappable_spans), that its gold
    evidence states is replaced by a name the evidence does not contain, or by a year 1-10 away;
    the evidence stays. The new name comes from the other claims' names of the same length in
    words that follow the same two words ("the state of Maharashtra" -> "the state of Kerala"),
    else the same word, if at least `min_pool` distinct ones do, else any name of that length,
    so the swap mostly keeps the kind of name and the claim reads like a real one. They teach what the claim alone cannot tell: the words of a supported claim,
    refuted by one swapped name. A claim with no such span gives none."""
    rng = random.Random(f"fever-swaps:{seed}")
    pools: dict[tuple, set[str]] = {}
    for claim in claims:
        for start, end, kind in _swappable_spans(claim.claim):
            if kind == "name":
                span = claim.claim[start:end]
                for key in _contexts(claim.claim, start, span.count(" ") + 1):
                    pools.setdefault(key, set()).add(span)
    ordered = {key: sorted(names) for key, names in pools.items() if len(names) >= min_pool or key[0] == "0"}
    out = []
    for claim in claims:
        if claim.label != SUPPORTS or rng.random() >= fraction:
            continue
        evidence = " ".join(claim.evidence)
        spans = [(a, b, kind) for a, b, kind in _swappable_spans(claim.claim) if claim.claim[a:b] in evidence]
        if not spans:
            continue
        start, end, kind = rng.choice(spans)
        span = claim.claim[start:end]
        pool = next((ordered[key] for key in _contexts(claim.claim, start, span.count(" ") + 1) if key in ordered), [])
        for _ in range(20):
            if kind == "year":
                other = str(int(span) + rng.choice([d for d in range(-10, 11) if d]))
            elif pool:
                other = rng.choice(pool)
            else:
                break
            if other.casefold() not in evidence.casefold() and other.casefold() not in claim.claim.casefold():
                out.append(FeverClaim(f"{claim.id}:swap", claim.claim[:start] + other + claim.claim[end:], REFUTES, claim.evidence))
                break
    return out


# --- evaluation views -------------------------------------------------------------------------

# Wikipedia-style probes of what a verification model must get right whatever its data: a
# sentence about something else changes nothing, two of them settle nothing, and the order of the
# evidence does not matter (each is also asked with its evidence reversed).
BEHAVIOUR_CHECKS: list[tuple[str, list[str], str]] = [
    ("Nikolaj Coster-Waldau is a Danish actor.",
     ["Nikolaj Coster-Waldau (born 27 July 1970) is a Danish actor and producer.",
      "The Amazon River flows through Brazil, Peru and Colombia."], SUPPORTS),
    ("Nikolaj Coster-Waldau is a French chef.",
     ["Nikolaj Coster-Waldau (born 27 July 1970) is a Danish actor and producer.",
      "The Amazon River flows through Brazil, Peru and Colombia."], REFUTES),
    ("Nikolaj Coster-Waldau is a Danish actor.",
     ["The Amazon River flows through Brazil, Peru and Colombia.",
      "Mount Kilimanjaro is a dormant volcano in Tanzania."], NOT_ENOUGH_INFO),
    ("Paris is the capital of France.",
     ["Paris is the capital and most populous city of France.",
      "The Great Barrier Reef is the world's largest coral reef system."], SUPPORTS),
    ("Paris is the capital of Germany.",
     ["Paris is the capital and most populous city of France.",
      "The Great Barrier Reef is the world's largest coral reef system."], REFUTES),
    ("Paris is the capital of France.",
     ["The Great Barrier Reef is the world's largest coral reef system.",
      "Johann Sebastian Bach was a German composer of the Baroque period."], NOT_ENOUGH_INFO),
]


def evaluation_views(claims: Sequence[FeverClaim], examples: Sequence[ClaimExample], seed: int, split: str,
                     max_evidence: int = MAX_EVIDENCE) -> dict[str, list[ClaimExample]]:
    """The same claims three ways, and the supported ones substituted:
    gold              SUPPORTS / REFUTES with their gold sentences only; NOT ENOUGH INFO with the
                      built (retrieved on-topic, or unrelated) sentences: the AttConv paper's
                      Table 9 "gold evidence" setting;
    gold+unrelated    gold sentences again; NOT ENOUGH INFO with two random sentences of the
                      split's pool (a user's test: claims with gold evidence, unverifiable claims
                      with evidence about something else);
    retrieved         as built for training: gold sentences among distractors;
    substituted       every SUPPORTS claim with a name or year to swap, swapped
                      (substitution_claims: REFUTES) with the original's gold sentences: its
                      accuracy is the share of swaps caught."""
    rng = random.Random(f"fever-views:{seed}:{split}")
    pool = sorted({s for c in claims for s in c.evidence})

    def gold_only(claim: FeverClaim) -> ClaimExample:
        sentences = claim.evidence[:max_evidence]
        return ClaimExample(claim.claim, sentences, claim.label, 0 if len(sentences) == 1 else None)

    gold, unrelated = [], []
    for claim, example in zip(claims, examples, strict=True):
        if claim.label == NOT_ENOUGH_INFO:
            gold.append(example)
            unrelated.append(ClaimExample(claim.claim, tuple(rng.sample(pool, 2)), claim.label, None))
        else:
            gold.append(gold_only(claim))
            unrelated.append(gold[-1])
    substituted = [gold_only(claim) for claim in substitution_claims(claims, seed, fraction=1.0)]
    return {"gold": gold, "gold+unrelated": unrelated, "retrieved": list(examples), "substituted": substituted}


def view_metrics(examples: Sequence[ClaimExample], logits: np.ndarray, labels: Sequence[str],
                 evidence_scores: Sequence[np.ndarray] | None = None) -> dict[str, float | None]:
    """3-way accuracy, SUPPORTS-vs-REFUTES accuracy on the decided claims (argmax over all three
    labels, and restricted to the two), each label's recall, and where evidence_scores are
    given, how often the single gold sentence among two or more gets the top score, against the
    chance of a random pick (mean 1/K). A recall whose label the examples lack is None.
    The balanced figures are the mean recall over the labels present (sklearn's
    balanced_accuracy_score): the accuracy on a set with as many claims of each label, which
    FEVER's own dev and test sets nearly are; the plain ones hold at this split's label mix (the
    training file's: 56% SUPPORTS). At any other mix, accuracy is the mix-weighted recalls."""
    gold = np.asarray([labels.index(e.label) for e in examples])
    predicted = logits.argmax(1)
    s, r, n = (labels.index(x) for x in (SUPPORTS, REFUTES, NOT_ENOUGH_INFO))
    decided = np.isin(gold, [s, r])
    two_way = np.where(logits[:, s] >= logits[:, r], s, r)
    recall = [float((predicted[gold == k] == k).mean()) if (gold == k).any() else None for k in range(len(labels))]
    out = {
        "examples": len(examples),
        "accuracy": float((predicted == gold).mean()),
        "supports_vs_refutes": float((predicted[decided] == gold[decided]).mean()) if decided.any() else None,
        "supports_vs_refutes_two_way": float((two_way[decided] == gold[decided]).mean()) if decided.any() else None,
        "supports_recall": recall[s],
        "refutes_recall": recall[r],
        "nei_recall": recall[n],
        "balanced_accuracy": float(np.mean([x for x in recall if x is not None])),
        "supports_vs_refutes_balanced": float(np.mean([recall[s], recall[r]])) if None not in (recall[s], recall[r]) else None,
    }
    if evidence_scores is not None:
        ranked = [(int(np.argmax(scores)) == e.gold_evidence, 1.0 / len(e.evidence))
                  for e, scores in zip(examples, evidence_scores) if e.gold_evidence is not None and len(e.evidence) > 1]
        if ranked:
            out["gold_first"] = float(np.mean([hit for hit, _ in ranked]))
            out["gold_first_chance"] = float(np.mean([chance for _, chance in ranked]))
            out["gold_first_claims"] = len(ranked)
    return out
