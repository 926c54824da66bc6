"""Textual entailment (`/entailment`): does the premise entail the hypothesis?"""

from core.tasks.base import Task, TextField

TASK = Task(
    "entailment", "/entailment", "entailment",
    "Does the premise entail the hypothesis? One pair or a batch.",
    (TextField("premise", "premise_ids"), TextField("hypothesis", "hypothesis_ids")),
    datasets=("snli", "sick", "wikiqa", "scitail", "mnli", "xnli", "qnli", "nli-mix", "fever-nli"),
    formats=("snli-jsonl", "snli-txt", "scitail-tsv", "nli-jsonl", "sick", "wikiqa-tsv"),
    example={"premise": "A man is playing a guitar on stage.", "hypothesis": "A person is making music."},
    label_synonyms={"entailment": ("entailment", "entails", "entailed", "entail"),
                    "neutral": ("neutral",),
                    "contradiction": ("contradiction", "contradicts", "contradictory", "contradict"),
                    "not_entailment": ("not_entailment", "non_entailment", "not_entailed")},
    required_label=("entailment", "entailment", "/zero-shot reads it"),
)

# The label names, over the entailment datasets, that mean "the premise entails the hypothesis"
# (SNLI's and MultiNLI's "entailment", SciTail's "entails"): zero-shot scoring reads them.
ENTAILING_LABELS = ("entailment", "entails", "entailed")
