"""Paraphrase identification (`/paraphrase`): do the two sentences say the same thing? The ABCNN
paper's own task (Yin et al. 2016, MSRP: Dolan & Brockett 2005). A pair of texts, read
symmetrically: any pair network serves it (AttConv, ABCNN)."""

from core.tasks.base import Task, TextField

TASK = Task(
    "paraphrase", "/paraphrase", "paraphrase",
    "Are the two sentences paraphrases of each other? One pair or a batch.",
    (TextField("sentence1", "sentence1_ids"), TextField("sentence2", "sentence2_ids")),
    datasets=("msrp",),
    formats=("msrp",),
    example={"sentence1": "The company's shares rose 5% after it reported record profits.",
             "sentence2": "After posting record earnings, the firm saw its stock climb five percent."},
    label_synonyms={"paraphrase": ("paraphrase", "equivalent", "duplicate", "is_duplicate", "1"),
                    "not_paraphrase": ("not_paraphrase", "not_equivalent", "not_duplicate", "0")},
)
