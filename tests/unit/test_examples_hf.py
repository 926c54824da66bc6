"""examples/hf: the /verify rule measurement recomputes the service's own rule, picks its
threshold on the other half of the claims, and the FEVER training pairs are labelled per sentence."""

from types import SimpleNamespace

import numpy as np

from examples.hf import train_fever_nli, verify_rules
from service.inference.runtime import TransformersRuntime, softmax


def test_least_neutral_recomputed_is_the_services_verify_rule():
    """verify_rules.least_neutral on the pair probabilities picks what TransformersRuntime.decide
    serves, so the offline rules are compared with the rule /verify really applies."""
    rng = np.random.default_rng(3)
    counts = [1, 2, 3, 5, 7] * 8
    logits = rng.normal(0.0, 2.0, size=(len(counts), max(counts), 3))
    items = [SimpleNamespace(ids=[list(range(k))]) for k in counts]
    served, _ = TransformersRuntime.decide(SimpleNamespace(undecided=1), logits, items)
    recomputed = [verify_rules.least_neutral(softmax(rows[:k])) for rows, k in zip(logits, counts)]
    assert served.argmax(1).tolist() == recomputed
    assert len(set(recomputed)) == 3


def test_max_e_vs_max_c_threshold_is_chosen_on_the_other_half():
    """NOT ENOUGH INFO claims peak at 0.6, decided ones at 0.9: both halves choose the first
    threshold above 0.6, and every claim is answered right."""
    nei = np.array([[0.6, 0.2, 0.2], [0.2, 0.6, 0.2]])
    supports = np.array([[0.9, 0.05, 0.05], [0.1, 0.8, 0.1]])
    refutes = np.array([[0.05, 0.05, 0.9]])
    per_claim, gold = [nei, supports, refutes, nei, supports, refutes], np.array([1, 0, 2, 1, 0, 2])
    predicted, chosen = verify_rules.two_fold_threshold(per_claim, gold)
    assert chosen == [0.65, 0.65]
    assert predicted.tolist() == gold.tolist()
    assert verify_rules.max_e_vs_max_c(nei, 0.5) == 0  # below the chosen threshold it would decide


def test_scores_split_decided_claims_from_nei():
    gold, predicted = np.array([0, 2, 1, 1]), np.array([0, 1, 1, 0])
    figures = verify_rules.scores(gold, predicted)
    assert figures == {"claims": 4, "accuracy": 0.5, "supports_vs_refutes": 0.5, "nei_recall": 0.5,
                       "balanced_accuracy": 0.5}


def test_training_pairs_label_each_sentence():
    """A gold sentence carries its claim's label (premise first), a distractor NOT ENOUGH INFO."""
    from training.examples import ClaimExample
    from training.readers import FeverClaim

    claim = FeverClaim("1", "Paris is in Germany.", "REFUTES", ("Paris is the capital of France.",))
    example = ClaimExample(claim.claim, ("Bach was a composer.", "Paris is the capital of France."), "REFUTES", 1)
    pairs = train_fever_nli.pairs_of([(claim, example)])
    labels = {v: k for k, v in train_fever_nli.ID2LABEL.items()}
    assert pairs == [("Bach was a composer.", "Paris is in Germany.", labels["NEUTRAL"]),
                     ("Paris is the capital of France.", "Paris is in Germany.", labels["CONTRADICTION"])]
