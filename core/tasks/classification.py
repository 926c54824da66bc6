"""Text classification (`/classify`): one text, one label of the model's (topic, sentiment, ...)."""

from core.tasks.base import Task, TextField

TASK = Task(
    "classification", "/classify", "classify",
    "Label a text with a classifier (topic, sentiment, ...), one text or a batch.",
    (TextField("text", "input_ids"),),
    datasets=("bbc", "tweets"),
    formats=("text-csv", "text-tsv", "text-jsonl"),
    example={"text": "Shares in the chip maker rose 8% after it raised its forecast for the year."},
)
