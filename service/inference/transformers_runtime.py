"""The runtime of a transformers bundle (core.transformers_bundle): the same engine, batching,
length buckets and grid as the attserve kind, over one token sequence per input.

An item is the input's sequence (its texts' ids joined by the tokenizer's template), bucketed by
its length; a call feeds `input_ids` (padded with the model's pad id), `attention_mask` (1 on
the real tokens) and, where the graph has it, `token_type_ids`, and reads `logits`. Padding
positions are masked out by the model itself, and every row is computed on its own, so an
input's answer does not depend on its batch (tests/unit/test_hf_bundles.py checks it).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnxruntime as ort

from core.bundle import Bundle, BundleError, CONFIG_FILE
from core.tasks import TASKS, TaskForm
from core.tokenization import fill_2d
from core.transformers_bundle import GRAPH_INPUTS, KIND, LOGITS, TemplateEncoder
from service.inference.runtime import WARMUP_ID, Item, ModelRuntime, batch_shape, bucket_of, length_buckets

SEQUENCE = "input_ids"


def check_graph(bundle: Bundle, session: ort.InferenceSession) -> None:
    """BundleError unless the graph takes the feeds config.json names and outputs logits as
    wide as the labels."""
    spec = bundle.config.transformers
    inputs = [i.name for i in session.get_inputs()]
    if sorted(inputs) != sorted(spec.graph_inputs) or not set(inputs) <= set(GRAPH_INPUTS):
        raise BundleError(f"{bundle.model_path}: inputs {inputs}, but {bundle.path / CONFIG_FILE} names "
                          f"{spec.graph_inputs}; import the model again (attserve bundle import-hf)")
    outputs = {o.name: o.shape for o in session.get_outputs()}
    if LOGITS not in outputs:
        raise BundleError(f"{bundle.model_path}: no output named {LOGITS!r} (outputs: {sorted(outputs)})")
    width = outputs[LOGITS][-1]
    if isinstance(width, int) and width != len(bundle.config.labels):
        raise BundleError(f"{bundle.path / CONFIG_FILE}: {len(bundle.config.labels)} labels but {bundle.model_path} "
                          f"outputs {width} logits")


class TransformersRuntime(ModelRuntime):
    """ModelRuntime over one sequence per input (the module's docstring)."""

    def __init__(self, bundle: Bundle, session: ort.InferenceSession, threads: int, encoder: TemplateEncoder) -> None:
        super().__init__(bundle, session, threads, encoder)
        spec = bundle.config.transformers
        if TASKS[self.config.task].form is TaskForm.CONTEXTS:
            raise BundleError(f"{bundle.path / CONFIG_FILE}: a {KIND} bundle serves one text or a pair, "
                              f"not task {self.config.task}")
        self.graph_inputs = list(spec.graph_inputs)
        self.pad_id = spec.pad_id
        self.template = encoder.template
        # one ids input for buckets and items: the sequence, its own length buckets
        self.input_names = [SEQUENCE]
        self.output_names = [LOGITS]
        self.buckets = {SEQUENCE: length_buckets(spec.max_length)}
        self._bucket_of_length = {SEQUENCE: [bucket_of(n, self.buckets[SEQUENCE]) for n in range(spec.max_length + 1)]}

    @classmethod
    def open(cls, bundle: Bundle, session: ort.InferenceSession, threads: int, tokenizer: bytes) -> "TransformersRuntime":
        """The runtime of a verified transformers bundle (ModelRuntime.load reads and checks it)."""
        check_graph(bundle, session)
        from tokenizers import Tokenizer
        try:
            encoder = TemplateEncoder(Tokenizer.from_str(tokenizer.decode("utf-8")))
        except Exception as exc:  # tokenizers raises plain Exception; the template check ValueError
            raise BundleError(f"{bundle.tokenizer_path}: {exc}") from None
        return cls(bundle, session, threads, encoder)

    def make_item(self, ids: Sequence) -> Item:
        """`ids` per text field of the task: their sequence, joined by the tokenizer's template."""
        return self.sequence_item(self.template.join(*ids))

    def sequence_item(self, sequence: Sequence[int]) -> Item:
        table = self._bucket_of_length[SEQUENCE]
        length = table[min(len(sequence), len(table) - 1)]
        return Item((sequence,), (length,), length)

    def item_of_shape(self, shape: tuple[int, ...]) -> Item:
        return self.sequence_item([WARMUP_ID] * shape[0])

    def warmup_shapes(self, max_batch_size: int, max_batch_tokens: int) -> list[tuple[int, Item]]:
        shapes = []
        for length in self.buckets[SEQUENCE]:
            item = self.sequence_item([WARMUP_ID] * length)
            largest = max(1, min(max_batch_size, max_batch_tokens // item.tokens))
            shapes += [(size, item) for size in sorted({1, largest})]
        return shapes

    def feeds(self, items: Sequence[Item]) -> dict[str, np.ndarray]:
        """input_ids padded with the pad id, attention_mask, token_type_ids (when the graph
        reads them), all (rows, L): L the items' largest bucket, rows the grid size (padding
        rows copy the first row, as ModelRuntime.feeds does)."""
        n = len(items)
        rows, (length,) = self.rows(n), batch_shape(items)
        sequences = [item.ids[0] for item in items]
        lengths = np.fromiter(map(len, sequences), dtype=np.intp, count=n)
        ids = np.full((rows, length), self.pad_id, dtype=np.int64)
        fill_2d(ids, sequences, lengths)  # writes each row's ids only, the pad id stays after them
        mask = np.zeros((rows, length), dtype=np.int64)
        mask[:n] = np.arange(length) < lengths[:, None]
        out = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.graph_inputs:
            types = np.zeros((rows, length), dtype=np.int64)
            fill_2d(types, [getattr(s, "type_ids", None) or [0] * len(s) for s in sequences], lengths)
            out["token_type_ids"] = types
        if rows > n:
            for arr in out.values():
                arr[n:] = arr[0]
        return out

