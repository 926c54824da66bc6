"""Claim verification (`/verify`): a claim read against its evidence sentences, FEVER's labels."""

from core.tasks.base import Task, TextField

TASK = Task(
    "verification", "/verify", "verify",
    "Verify a claim against evidence sentences; `evidence_scores` weighs each one.",
    (TextField("claim", "claim_ids"),
     TextField("evidence", "evidence_ids", many=True,
               too_many="send the most relevant sentences or split the claim's evidence over several inputs",
               description="evidence sentences; at most the model's max_evidence")),
    per_text="evidence_scores", per_text_description="weight of each evidence sentence, in input order",
    datasets=("snli-verification", "fever", "fever-swaps", "fever-swaps-half"),
    formats=("fever-jsonl", "fever-csv"),
    example={"claim": "The Eiffel Tower is in Berlin.",
             "evidence": ["The Eiffel Tower is a wrought-iron lattice tower in Paris, France."]},
    # a pair model's labels read as a claim's (evidence as the premise, the claim as the hypothesis)
    label_synonyms={"SUPPORTS": ("supports", "supported", "entailment", "entails", "entailed"),
                    "REFUTES": ("refutes", "refuted", "contradiction", "contradicts", "contradictory"),
                    "NOT ENOUGH INFO": ("not_enough_info", "nei", "neutral")},
    required_label=("NOT ENOUGH INFO", "neutral", "/verify keeps the evidence sentence that most decides the claim, "
                                                  "the least neutral"),
)
