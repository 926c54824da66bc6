"""One onnxruntime session per bundle: provider choice, length buckets, padding, warm-up, run.

The runtime knows nothing of HTTP or queues. The batcher hands it a batch of `Item`s; it runs
them in as few graph calls as pays (`plan_calls`: items of very different bucket shapes run
apart, so short items are not padded to the longest), pads each call's items to their largest
bucket shape (so the shapes a server sees are the few it warmed up), and returns each item's
own slice of the outputs.
"""

from __future__ import annotations

import itertools
import logging
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from core.bundle import CONFIG_FILE, Bundle, BundleError, check_output_width, read_bundle
from core.tasks import TASKS, TEXT_FIELD_OF_INPUT, TaskForm
from core.tokenization import TextEncoder, fill_2d, fill_3d
from core.transformers_bundle import GRAPH_INPUTS, KIND, LOGITS, UNDECIDED_LABEL, TemplateEncoder, listed_first

if TYPE_CHECKING:
    from service.settings import Settings

log = logging.getLogger("service.inference.runtime")

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
# Smallest length bucket: below it padding costs less than an extra shape.
MIN_LENGTH_BUCKET = 8
# A transformers bundle's sequences (a pair's two texts in one) take length buckets every
# MIN_LENGTH_BUCKET tokens up to this many, then powers of two: a transformer's cost grows with
# every padded token, and SNLI-sized pairs (20-50 tokens) padded to powers of two ran 1.42x
# their tokens, to steps of 8 1.13x (bench-results/peers-transformers); the four extra shapes are
# short ones, cheap to warm up.
TRANSFORMER_STEPS_UP_TO = 64
# Any real id for warm-up inputs ([UNK]); the values do not matter, the shapes do.
WARMUP_ID = 1
# The CUDAExecutionProvider options /v1/models reports, as onnxruntime has them in force.
CUDA_OPTION_KEYS = ("device_id", "use_tf32", "cudnn_conv_algo_search", "arena_extend_strategy", "gpu_mem_limit")


class DeviceUnavailable(RuntimeError):
    """DEVICE=cuda asked for a GPU that this onnxruntime build or machine does not have."""


def requested_providers(device: str) -> list[str]:
    """Execution providers to ask onnxruntime for. DEVICE=cuda without a CUDA-enabled
    onnxruntime fails here, before the server binds its port."""
    available = ort.get_available_providers()
    if device == "cpu":
        return [CPU]
    if device == "cuda":
        if CUDA not in available:
            raise DeviceUnavailable(
                f"ATTSERVE_DEVICE=cuda but onnxruntime {ort.__version__} offers no {CUDA} "
                f"(available: {available}); install onnxruntime-gpu on a machine with an NVIDIA GPU "
                f"or set ATTSERVE_DEVICE=cpu"
            )
        return [CUDA, CPU]
    return [CUDA, CPU] if CUDA in available else [CPU]


def load_runtime(bundle: str | Path, settings: Settings, threads: int | None = None) -> "ModelRuntime":
    """The runtime of `bundle` as the service builds one, for every caller (the registry,
    `attserve score`, the benchmarks): the providers `settings.device` asks for, their CUDA
    options, `threads` intra-op threads (None: Settings.threads_per_model(1))."""
    threads = settings.threads_per_model(1) if threads is None else threads
    return ModelRuntime.load(bundle, requested_providers(settings.device), threads, settings.cuda_provider_options())


def length_buckets(max_length: int, smallest: int = MIN_LENGTH_BUCKET, steps_up_to: int = 0) -> list[int]:
    """Powers of two from `smallest` below `max_length`, then `max_length` itself; with
    `steps_up_to`, every multiple of `smallest` up to it first (then powers of two on)."""
    out, n = [], smallest
    while n < max_length:
        out.append(n)
        n = n + smallest if n < steps_up_to else n * 2
    return out + [max_length]


def batch_grid(max_batch_size: int) -> list[int]:
    """The batch sizes a graph call is padded to: powers of two below `max_batch_size`, then it."""
    return length_buckets(max_batch_size, smallest=1)


def bucket_of(n: int, buckets: Sequence[int]) -> int:
    for b in buckets:
        if n <= b:
            return b
    return buckets[-1]


def padded_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The bucket shape that holds both: the larger size in each dimension."""
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def batch_shape(items: Sequence["Item"]) -> tuple[int, ...]:
    shape = items[0].shape
    for item in items[1:]:
        shape = padded_shape(shape, item.shape)
    return shape


def plan_calls(shapes: Sequence[tuple[int, ...]], shape_tokens, call_overhead_tokens: float,
               rows=None) -> list[list[int]]:
    """Split a batch (the items' bucket shapes) into graph calls: groups of indices whose
    padded cost, sum over calls of (call_overhead_tokens + n x padded tokens of the call's
    shape), is least. The distinct shapes are sorted by cost and each call takes a contiguous
    run of them (dynamic programming over at most a few dozen shapes), so one long item no
    longer pads thirty short ones. 0: one call per shape; infinity: always one call. `rows`:
    the rows a call of n items runs (the batch grid pads n up; None: n)."""
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for index, shape in enumerate(shapes):
        by_shape.setdefault(shape, []).append(index)
    if len(by_shape) == 1 or math.isinf(call_overhead_tokens):
        return [list(range(len(shapes)))]
    distinct = sorted(by_shape, key=lambda shape: (shape_tokens(shape), shape))  # ties: a fixed order
    best = [0.0] + [math.inf] * len(distinct)  # best[j]: least cost of distinct[:j]
    start = [0] * (len(distinct) + 1)  # start[j]: where the last call of that plan begins
    for j in range(1, len(distinct) + 1):
        shape, count = distinct[j - 1], 0
        for i in range(j - 1, -1, -1):  # the last call takes distinct[i:j]
            shape = padded_shape(shape, distinct[i])
            count += len(by_shape[distinct[i]])
            cost = best[i] + call_overhead_tokens + (count if rows is None else rows(count)) * shape_tokens(shape)
            if cost < best[j]:
                best[j], start[j] = cost, i
    calls, j = [], len(distinct)
    while j > 0:
        calls.append(sorted(k for shape in distinct[start[j]:j] for k in by_shape[shape]))
        j = start[j]
    return calls[::-1]


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row softmax of logits / temperature, shifted by the row max so exp never overflows."""
    z = logits.astype(np.float64)
    if temperature != 1.0:
        z /= temperature
    z -= z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


# explanation weights are sent to 4 decimals: a 48 x 32 alignment stays ~10 kB of JSON
EXPLANATION_DECIMALS = 4


def _rounded(values: np.ndarray) -> list:
    return np.round(values.astype(np.float64), EXPLANATION_DECIMALS).tolist()


def _alignment(matrix: np.ndarray, rows: str, columns: str, normalize_rows: bool) -> dict:
    if normalize_rows:  # each row sums to 1 over the valid columns (a row of zeros stays zeros)
        matrix = matrix / np.maximum(matrix.sum(axis=-1, keepdims=True), 1e-12)
    return {"rows": TEXT_FIELD_OF_INPUT[rows], "columns": TEXT_FIELD_OF_INPUT[columns], "weights": _rounded(matrix)}


@dataclass(frozen=True, slots=True)
class Item:
    """One input's token ids (per graph input: a list of ids, or for a list field a list of id
    lists), the bucket shape it pads to (two dimensions for a list field: texts, length), and
    the padded tokens it costs."""

    ids: tuple
    shape: tuple[int, ...]
    tokens: int


@dataclass(frozen=True)
class ItemOutput:
    """One item's answer, as plain Python values: the event loop only puts them in a dict."""

    logits: np.ndarray | None  # (C,); None for a task without logits
    probs: list[float] | None  # (C,) softmax of logits / the bundle's temperature
    label_index: int | None  # argmax of the logits
    per_text: list[float] | None  # (K,) the task's per-text output (evidence_scores), this item's texts only
    # asked for: this item's slice of the explanation output, ready for the answer (explanation_of)
    explanation: dict | None = None


@dataclass(frozen=True)
class BatchOutput:
    """A batch's answers, row i for item i, as plain Python values made once per batch (one
    softmax, one argmax, one conversion to Python floats) in the inference thread."""

    logits: np.ndarray | None  # (n, C); None for a task without logits
    probs: list[list[float]] | None  # (n, C) softmax of logits / the bundle's temperature
    label_index: list[int] | None  # (n,) argmax of the logits
    per_text: list[list[float]] | None  # each item's per-text output (evidence_scores), its own texts only
    explanations: dict[int, dict]  # row -> its explanation, for the rows that asked (explanation_of)

    def item(self, row: int) -> ItemOutput:
        """Row `row` as one item's output."""
        return ItemOutput(None if self.logits is None else self.logits[row],
                          None if self.probs is None else self.probs[row],
                          None if self.label_index is None else self.label_index[row],
                          None if self.per_text is None else self.per_text[row], self.explanations.get(row))

    def items(self) -> list[ItemOutput]:
        return [self.item(row) for row in range(len(self))]

    def __len__(self) -> int:
        rows = self.probs if self.probs is not None else self.per_text
        return 0 if rows is None else len(rows)


class ModelRuntime:
    def __init__(self, bundle: Bundle, session: ort.InferenceSession, threads: int, encoder: TextEncoder) -> None:
        self.bundle = bundle
        self.config = bundle.config
        self.session = session
        self.threads = threads
        self.encoder = encoder
        self.provider = session.get_providers()[0]
        # the CUDA options in force, as onnxruntime reports them ({} on CPU)
        reported = session.get_provider_options().get(self.provider, {}) if self.provider == CUDA else {}
        self.provider_options = {k: str(reported[k]) for k in CUDA_OPTION_KEYS if k in reported}
        # batch sizes a call is padded to (use_batch_grid); None: a call runs as many rows as items
        self.batch_sizes: list[int] | None = None
        # what the last warm-up ran: {"seconds", "shapes", "batch_grid"}
        self.warmup_report: dict | None = None
        # card.calibration.temperature (> 0, checked by BundleConfig): scores = softmax(logits / T)
        self.temperature = float(self.config.temperature)
        self.input_names = list(self.config.inputs)
        self.output_names = list(self.config.outputs)
        task = TASKS[self.config.task]
        # the inputs of a list field (rank 3: texts x tokens): padded in two dimensions
        self.list_inputs = {f.input for f in task.fields if f.many}
        # which ids input's item entry holds the texts the per-text output scores
        self.list_index = next((i for i, f in enumerate(task.fields) if f.many), None)
        self.labelled = task.labelled
        self.per_text_output = self.output_names.index(task.per_text) if task.per_text else None
        self.explanation = self.config.explanation
        self.buckets = {name: length_buckets(self.config.max_lengths[name]) for name in self.input_names}
        # bucket sizes of the number of texts in a list field
        self.count_buckets = length_buckets(self.config.max_evidence, smallest=1) if self.list_inputs else []
        # bucket_of as a table, length -> bucket, per input (and for the texts of a list field)
        self._bucket_of_length = {name: [bucket_of(n, b) for n in range(b[-1] + 1)] for name, b in self.buckets.items()}
        self._bucket_of_count = [bucket_of(n, self.count_buckets) for n in range(self.count_buckets[-1] + 1)] \
            if self.count_buckets else []
        # what one more graph call costs, in padded tokens of this model (plan_calls); set by
        # warmup(), measured there unless configured; infinity until then (one call per batch)
        self.call_overhead_tokens = math.inf

    @property
    def name(self) -> str:
        return self.config.name

    @classmethod
    def load(cls, path: str | Path, providers: list[str], threads: int,
             cuda_options: dict[str, str] | None = None) -> "ModelRuntime":
        """Verify the bundle (checksums, label count vs logits width) and open its session and
        tokenizer from the bytes the checksums were computed on (core.bundle.read_bundle);
        `cuda_options` go to CUDAExecutionProvider when it is asked for (Settings.cuda_provider_options)."""
        files = read_bundle(path)
        bundle = files.bundle
        asked: list = list(providers)
        if providers[0] == CUDA:
            asked[0] = (CUDA, dict(cuda_options or {}))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Batches arrive in bursts; spinning worker threads between them would burn the cores
        # the other models and the event loop need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        # The process-wide logger too: the CUDA EP logs "Conv ... running in Fallback mode" there,
        # not in the session's, once per node and new shape.
        ort.set_default_logger_severity(3)
        try:
            session = ort.InferenceSession(files.model, sess_options=options, providers=asked)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise BundleError(f"{bundle.model_path}: onnxruntime cannot load it: {exc}") from None
        actual = session.get_providers()
        if providers[0] == CUDA and actual[0] != CUDA:
            # onnxruntime-gpu silently falls back to CPU when CUDA libraries are missing.
            raise DeviceUnavailable(
                f"{bundle.model_path}: {CUDA} requested but onnxruntime runs it on {actual[0]} "
                f"(CUDA/cuDNN libraries or the GPU missing)"
            )
        if bundle.config.kind == KIND:  # a Hugging Face classifier: its own feeds and items
            return TransformersRuntime.open(bundle, session, threads, files.tokenizer)
        width = session.get_outputs()[0].shape[-1]
        check_output_width(bundle, width)
        try:
            encoder = TextEncoder(Tokenizer.from_str(files.tokenizer.decode("utf-8")))
        except Exception as exc:  # tokenizers raises plain Exception; TextEncoder ValueError; bytes UnicodeDecodeError
            raise BundleError(f"{bundle.tokenizer_path}: tokenizers cannot load it: {exc}") from None
        return cls(bundle, session, threads, encoder)

    # --- items --------------------------------------------------------------------------

    def make_item(self, ids: Sequence) -> Item:
        """`ids` per graph input: a list of ids, or (a list field) a list of id lists."""
        shape: list[int] = []
        tokens = 0
        for name, value in zip(self.input_names, ids):
            table = self._bucket_of_length[name]
            if name in self.list_inputs:
                count = self._count_bucket(len(value))
                length = table[min(max(len(v) for v in value), len(table) - 1)]
                shape += [count, length]
                tokens += count * length
            else:
                length = table[min(len(value), len(table) - 1)]
                shape.append(length)
                tokens += length
        return Item(tuple(ids), tuple(shape), tokens)

    def _count_bucket(self, count: int) -> int:
        table = self._bucket_of_count
        return table[min(count, len(table) - 1)]

    def shape_tokens(self, shape: tuple[int, ...]) -> int:
        """Padded tokens one item of this bucket shape costs (as `make_item` counts them)."""
        tokens, at = 0, 0
        for name in self.input_names:
            if name in self.list_inputs:
                tokens += shape[at] * shape[at + 1]
                at += 2
            else:
                tokens += shape[at]
                at += 1
        return tokens

    def inputs_per_call(self, max_batch_size: int) -> int:
        """The most inputs one graph call may take: the service's `max_batch_size`, unless the
        graph's answers would then depend on the rest of the call (TransformersRuntime: int8)."""
        return max_batch_size

    def use_batch_grid(self, max_batch_size: int | None) -> None:
        """Pad every call's batch dimension to the grid of `max_batch_size` (None: no grid)."""
        self.batch_sizes = batch_grid(max_batch_size) if max_batch_size is not None else None

    def rows(self, n: int) -> int:
        """The rows a call of `n` items runs: the grid size that holds them (n without a grid)."""
        return n if self.batch_sizes is None else bucket_of(n, self.batch_sizes)

    def padded_tokens(self, items: Sequence[Item], calls: Sequence[Sequence[int]]) -> int:
        """Padded tokens of a batch run as `calls` (lists of item indices, as run_batch made
        them): each call pads its items to their largest bucket shape, and its rows to the grid."""
        return sum(self.rows(len(call)) * self.shape_tokens(batch_shape([items[k] for k in call])) for call in calls)

    def feed_shapes(self, rows: int, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The input tensors' shapes (in input order) of a call of `rows` rows padded to `shape`."""
        out, at = [], 0
        for name in self.input_names:
            if name in self.list_inputs:
                out.append((rows, shape[at], shape[at + 1]))
                at += 2
            else:
                out.append((rows, shape[at]))
                at += 1
        return tuple(out)

    def feeds(self, items: Sequence[Item]) -> dict[str, np.ndarray]:
        """Pad items to the batch's largest bucket shape (per dimension), and with the grid on,
        the batch to its grid size with copies of the first row (real ids, so a padding row
        computes what a real one does; every row is computed on its own, and the padding rows
        are dropped in `infer` before anything reads them). Each input's ids go straight into
        an array of the call's final shape, in one scatter (core.tokenization.fill_2d)."""
        n = len(items)
        shapes = self.feed_shapes(self.rows(n), batch_shape(items))
        out: dict[str, np.ndarray] = {}
        for i, (name, shape) in enumerate(zip(self.input_names, shapes)):
            arr = np.zeros(shape, dtype=np.int64)  # PAD_ID
            column = [item.ids[i] for item in items]
            if name in self.list_inputs:
                fill_3d(arr, column)  # (rows, K, Le)
            else:
                fill_2d(arr, column)  # (rows, L)
            if shape[0] > n:
                arr[n:] = arr[0]
            out[name] = arr
        return out

    # --- inference ----------------------------------------------------------------------

    def run(self, feeds: dict[str, np.ndarray], explain: bool = False) -> list[np.ndarray]:
        """The task's outputs, then (`explain` and the bundle has one) the explanation output."""
        names = self.output_names
        if explain and self.explanation is not None:
            names = [*names, self.explanation.output]
        if self.provider == CUDA:
            # IO binding: inputs copied to the GPU once, outputs fetched once, no per-run staging.
            binding = self.session.io_binding()
            for name, arr in feeds.items():
                binding.bind_cpu_input(name, arr)
            for name in names:
                binding.bind_output(name, "cuda")
            self.session.run_with_iobinding(binding)
            return binding.copy_outputs_to_cpu()
        return self.session.run(names, feeds)

    def run_batch(self, items: Sequence[Item], explain_rows: Sequence[int] = ()) -> tuple[BatchOutput, list[list[int]]]:
        """Run a batch in the graph calls `plan_calls` picks: the outputs in item order, and the
        calls made (lists of item indices). One softmax, argmax and conversion to Python values
        for the whole batch, once its calls' rows are back in item order."""
        calls = plan_calls([item.shape for item in items], self.shape_tokens, self.call_overhead_tokens,
                           None if self.batch_sizes is None else self.rows)
        if len(calls) == 1:
            return self.run_call(items, explain_rows), calls
        wanted = set(explain_rows)
        parts = [self._call([items[k] for k in call], [row for row, index in enumerate(call) if index in wanted])
                 for call in calls]
        # row j of call c is item calls[c][j]: rows in call order, then put back in item order
        order = [index for call in calls for index in call]
        place = [0] * len(items)
        for at, index in enumerate(order):
            place[index] = at
        # a reranker's first output is its per-text scores, as wide as each call's texts: not joined
        logits = np.concatenate([logits for logits, _, _ in parts])[place] if self.labelled else None
        per_text = None
        if self.per_text_output is not None:
            rows = [row for _, scores, _ in parts for row in scores]
            per_text = [rows[at] for at in place]
        explanations = {call[row]: e for call, (_, _, made) in zip(calls, parts) for row, e in made.items()}
        return self._output(logits, per_text, explanations), calls

    def run_call(self, items: Sequence[Item], explain_rows: Sequence[int] = ()) -> BatchOutput:
        """Run one graph call (padded to the items' largest bucket shape); each item gets back its
        own row, and the items at `explain_rows` their explanation."""
        return self._output(*self._call(items, explain_rows))

    def _output(self, logits: np.ndarray, per_text: list | None, explanations: dict[int, dict]) -> BatchOutput:
        """Softmax, argmax and the conversion to Python floats, once per batch and in the
        inference thread, rather than per request on the event loop."""
        if not self.labelled:  # outputs[0] is not logits, and there is no label
            return BatchOutput(None, None, None, per_text, explanations)
        probs = softmax(logits, self.temperature).tolist()  # (B, C), one division per batch
        return BatchOutput(logits, probs, logits.argmax(axis=-1).tolist(), per_text, explanations)

    def _call(self, items: Sequence[Item], explain_rows: Sequence[int]) -> tuple[np.ndarray, list | None, dict[int, dict]]:
        """One graph call: the items' rows of its first output (logits), their per-text outputs cut
        to their own texts, and the explanations of the items at `explain_rows`."""
        feeds = self.feeds(items)
        explain = bool(explain_rows) and self.explanation is not None
        outputs = self.run(feeds, explain=explain)
        rows, n = self.rows(len(items)), len(items)
        if rows > n:
            # the grid's padding rows go here, before softmax, scores or explanations see them:
            # they are the last rows of every output (an output of B x K rows, the verification
            # explanation's, is row-major: the last (rows - n) x K)
            outputs = [out[: n * (out.shape[0] // rows)] for out in outputs]
        logits = outputs[0]  # (B, C)
        per_text = None
        if self.per_text_output is not None:
            scores = outputs[self.per_text_output].tolist()  # (B, K)
            list_index = self.list_index
            per_text = [scores[row][: len(item.ids[list_index])] for row, item in enumerate(items)]
        explanations = {}
        for row in explain_rows:
            explanations[row] = {} if not explain else self.explanation_of(
                outputs[-1], row, items[row], feeds, None if per_text is None else per_text[row])
        return logits, per_text, explanations

    def explanation_of(self, tensor: np.ndarray, row: int, item: Item, feeds: dict[str, np.ndarray],
                       evidence_scores: list[float] | None) -> dict:
        """Item `row`'s part of the explanation output, cut to its own tokens: alignment rows are
        the hypothesis (claim, text) tokens, columns the premise (evidence, text) tokens."""
        spec = self.explanation
        ids = dict(zip(self.input_names, item.ids))
        if spec.kind == "token_weights":
            return {"token_weights": _rounded(tensor[row, : len(ids[spec.rows])])}
        if spec.layout == "batch":
            matrix = tensor[row, : len(ids[spec.rows]), : len(ids[spec.columns])]  # (rows, columns)
            rows, columns = spec.rows, spec.columns
            if rows == "premise_ids":  # ABCNN's A is premise x hypothesis; answers read hypothesis -> premise
                matrix, rows, columns = matrix.T, columns, rows
            return {"alignment": _alignment(matrix, rows, columns, spec.normalize_rows)}
        # a list field's texts (verification: rows the claim, columns each evidence sentence)
        claim, evidence = ids[spec.rows], ids[spec.columns]
        count = feeds[spec.columns].shape[1]  # text slots in this batch
        out = []
        for k, sentence in enumerate(evidence):
            if spec.layout == "evidence_slots":  # (B*K, Lc, Le)
                matrix = tensor[row * count + k, : len(claim), : len(sentence)]
            else:  # evidence_concatenated: (B, Lc, K*Le)
                length = tensor.shape[2] // count
                matrix = tensor[row, : len(claim), k * length : k * length + len(sentence)]
            out.append({"share": evidence_scores[k],
                        "alignment": _alignment(matrix, spec.rows, spec.columns, spec.normalize_rows)})
        return {TEXT_FIELD_OF_INPUT[spec.columns]: out}

    def warmup_shapes(self, max_batch_size: int, max_batch_tokens: int) -> list[tuple[int, Item]]:
        """(batch size, item) pairs covering every length bucket at batch size 1 and at the
        largest batch the token budget allows, so no first request pays for a new shape."""
        depth = max(len(b) for b in self.buckets.values())
        if self.count_buckets:
            depth = max(depth, len(self.count_buckets))
        shapes = []
        for level in range(depth):
            ids: list = []
            for name in self.input_names:
                length = self.buckets[name][min(level, len(self.buckets[name]) - 1)]
                if name in self.list_inputs:
                    count = self.count_buckets[min(level, len(self.count_buckets) - 1)]
                    ids.append([[WARMUP_ID] * length for _ in range(count)])
                else:
                    ids.append([WARMUP_ID] * length)
            item = self.make_item(ids)
            largest = max(1, min(max_batch_size, max_batch_tokens // item.tokens))
            for size in sorted({1, largest}):
                shapes.append((size, item))
        return shapes

    def bucket_shapes(self) -> list[tuple[int, ...]]:
        """Every bucket shape an item can have: the product of each input's buckets."""
        dims: list[list[int]] = []
        for name in self.input_names:
            if name in self.list_inputs:
                dims += [self.count_buckets, self.buckets[name]]
            else:
                dims.append(self.buckets[name])
        return list(itertools.product(*dims))

    def item_of_shape(self, shape: tuple[int, ...]) -> Item:
        """A warm-up item whose bucket shape is `shape`."""
        ids: list = []
        at = 0
        for name in self.input_names:
            if name in self.list_inputs:
                ids.append([[WARMUP_ID] * shape[at + 1] for _ in range(shape[at])])
                at += 2
            else:
                ids.append([WARMUP_ID] * shape[at])
                at += 1
        item = self.make_item(ids)
        assert item.shape == shape, (item.shape, shape)
        return item

    def grid_calls(self, max_batch_size: int, max_batch_tokens: int) -> list[tuple[int, tuple[int, ...]]]:
        """(rows, bucket shape) of every call the batcher and the grid can produce: per bucket
        shape, each grid size up to the one that holds the most items the batch limits allow
        (max_batch_size, and max_batch_tokens // the shape's tokens, at least 1). Needs the grid."""
        assert self.batch_sizes is not None, "use_batch_grid first"
        out = []
        for shape in self.bucket_shapes():
            most = self.rows(max(1, min(max_batch_size, max_batch_tokens // self.shape_tokens(shape))))
            out += [(rows, shape) for rows in self.batch_sizes if rows <= most]
        return out

    def grid_feed_shapes(self, max_batch_size: int, max_batch_tokens: int) -> set[tuple[tuple[int, ...], ...]]:
        """The input shapes onnxruntime can see with the grid on (feed_shapes of grid_calls)."""
        return {self.feed_shapes(rows, shape) for rows, shape in self.grid_calls(max_batch_size, max_batch_tokens)}

    def warmup(self, max_batch_size: int, max_batch_tokens: int, call_overhead_tokens: float | None = None) -> float:
        """Run every warm-up shape once (with the batch grid on: every shape of the grid), then
        set `call_overhead_tokens` (measured when None); returns seconds taken, and keeps what
        it ran in `warmup_report`."""
        start = time.perf_counter()
        shapes = self.warmup_shapes(max_batch_size, max_batch_tokens)
        timed: dict[tuple[int, tuple[int, ...]], float] = {}  # (size, shape) -> seconds of its warm-up run
        if self.batch_sizes is None:
            for size, item in shapes:
                began = time.perf_counter()
                self.run_call([item] * size)
                timed[(size, item.shape)] = time.perf_counter() - began
            count = len({(self.rows(size), item.shape) for size, item in shapes})
        else:
            calls = self.grid_calls(max_batch_size, max_batch_tokens)
            for rows, shape in calls:
                self.run_call([self.item_of_shape(shape)] * rows)
            count = len(calls)
        self.call_overhead_tokens = (self.measure_call_overhead(shapes, timed) if call_overhead_tokens is None
                                     else float(call_overhead_tokens))
        seconds = time.perf_counter() - start
        self.warmup_report = {"seconds": round(seconds, 3), "shapes": count, "batch_grid": self.batch_sizes}
        return seconds

    def measure_call_overhead(self, shapes: list[tuple[int, Item]],
                              timed: dict[tuple[int, tuple[int, ...]], float] | None = None) -> float:
        """The cost of one graph call in padded tokens: a call of one smallest item (c0) against
        the cost per padded token of the full warm-up batches ((t - c0) / tokens), the median
        over those shapes; best-of-2 timings, a batch's warm-up run (`timed`: (size, shape) ->
        seconds) counting as one of its two, which saves a third of the warm-up (bbc-act 6.9 ->
        4.6 s). Measured on this machine and provider, it tracks the split that is fastest in
        bench (bench-results/plan-calls)."""
        timed = timed or {}

        def fastest(items: list[Item], repeats: int, best: float = math.inf) -> float:
            for _ in range(repeats):
                t0 = time.perf_counter()
                self.run_call(items)
                best = min(best, time.perf_counter() - t0)
            return best

        _, smallest = min(shapes, key=lambda pair: (pair[1].tokens, pair[0]))
        c0 = fastest([smallest], 5)
        estimates = []
        for size, item in shapes:
            if size > 1:
                warm = timed.get((size, item.shape), math.inf)
                per_token = (fastest([item] * size, 1 if warm < math.inf else 2, warm) - c0) / \
                    (self.rows(size) * item.tokens)  # rows run
                if per_token > 0:
                    estimates.append(c0 / per_token)
        return float(statistics.median(estimates)) if estimates else math.inf


# --- the transformers kind ------------------------------------------------------------------
# A transformers bundle (core.transformers_bundle): the same engine, batching, length buckets
# and grid, over one token sequence per input. An item is the input's sequence (its texts' ids
# joined by the tokenizer's template), bucketed by its length; a call feeds `input_ids` (padded
# with the model's pad id), `attention_mask` (1 on the real tokens) and, where the graph has it,
# `token_type_ids`, and reads `logits`. The model masks the padding itself and computes every
# row on its own, so an input's answer does not depend on its batch
# (tests/unit/test_hf_bundles.py checks it).

# the one ids input of a transformers runtime's items and buckets: the sequence
SEQUENCE = "input_ids"


def check_graph(bundle: Bundle, session: ort.InferenceSession) -> None:
    """BundleError unless the graph takes the feeds config.json names and outputs logits as
    wide as the labels (a reranker's: one), for a task this kind serves."""
    spec = bundle.config.transformers
    inputs = [i.name for i in session.get_inputs()]
    if sorted(inputs) != sorted(spec.graph_inputs) or not set(inputs) <= set(GRAPH_INPUTS):
        raise BundleError(f"{bundle.model_path}: inputs {inputs}, but {bundle.path / CONFIG_FILE} names "
                          f"{spec.graph_inputs}; import the model again (attserve bundle import-hf)")
    outputs = {o.name: o.shape for o in session.get_outputs()}
    if LOGITS not in outputs:
        raise BundleError(f"{bundle.model_path}: no output named {LOGITS!r} (outputs: {sorted(outputs)})")
    task = TASKS[bundle.config.task]
    if task.form is TaskForm.CONTEXTS and task.labelled and UNDECIDED_LABEL not in bundle.config.labels:
        raise BundleError(f"{bundle.path / CONFIG_FILE}: a {KIND} {task.name} bundle needs the label "
                          f"{UNDECIDED_LABEL!r} (its pairs' neutral); import the model again (attserve bundle import-hf)")
    width, wanted = outputs[LOGITS][-1], len(bundle.config.labels) if task.labelled else 1  # a reranker: one logit
    if isinstance(width, int) and width != wanted:
        raise BundleError(f"{bundle.path / CONFIG_FILE}: {task.name} reads {wanted} logits but {bundle.model_path} "
                          f"outputs {width}")


class TransformersRuntime(ModelRuntime):
    """ModelRuntime over one sequence per input (the comment above), or for a text and a list
    one sequence per text of the list: an item of (texts, length) bucket shape. A reranker's
    per-text scores are its sequences' one logit; verification reads the claim against each
    evidence sentence (`decide`)."""

    def __init__(self, bundle: Bundle, session: ort.InferenceSession, threads: int, encoder: TemplateEncoder) -> None:
        super().__init__(bundle, session, threads, encoder)
        spec = bundle.config.transformers
        self.graph_inputs = list(spec.graph_inputs)
        self.pad_id = spec.pad_id
        self.template = encoder.template
        # one ids input for buckets and items: the sequence (a list of them for a list field)
        self.input_names = [SEQUENCE]
        self.list_inputs = {SEQUENCE} if self.list_inputs else set()
        self.list_index = 0 if self.list_inputs else None
        self.output_names = [LOGITS]
        self.listed_first = listed_first(TASKS[self.config.task])
        # verification: the logit of "the evidence does not decide the claim"
        self.undecided = self.config.labels.index(UNDECIDED_LABEL) if self.list_inputs and self.labelled else None
        self.buckets = {SEQUENCE: length_buckets(spec.max_length, steps_up_to=TRANSFORMER_STEPS_UP_TO)}
        self._bucket_of_length = {SEQUENCE: [bucket_of(n, self.buckets[SEQUENCE]) for n in range(spec.max_length + 1)]}

    @classmethod
    def open(cls, bundle: Bundle, session: ort.InferenceSession, threads: int, tokenizer: bytes) -> "TransformersRuntime":
        """The runtime of a verified transformers bundle (ModelRuntime.load reads and checks it)."""
        check_graph(bundle, session)
        try:
            encoder = TemplateEncoder(Tokenizer.from_str(tokenizer.decode("utf-8")))
        except Exception as exc:  # tokenizers raises plain Exception; the template check ValueError
            raise BundleError(f"{bundle.tokenizer_path}: {exc}") from None
        return cls(bundle, session, threads, encoder)

    def inputs_per_call(self, max_batch_size: int) -> int:
        return min(max_batch_size, self.config.transformers.inputs_per_call or max_batch_size)

    def make_item(self, ids: Sequence) -> Item:
        """`ids` per text field of the task: their sequence, joined by the tokenizer's template
        (a text and a list: the first text, as each pair keeps it, with each listed text)."""
        if not self.list_inputs:
            return ModelRuntime.make_item(self, (self.template.join(*ids),))
        first, listed = ids
        pairs = [(t, first[: t.first_kept]) if self.listed_first else (first[: t.first_kept], t) for t in listed]
        return ModelRuntime.make_item(self, ([self.template.join(*pair) for pair in pairs],))

    def item_of_shape(self, shape: tuple[int, ...]) -> Item:
        if self.list_inputs:
            return ModelRuntime.make_item(self, ([[WARMUP_ID] * shape[1] for _ in range(shape[0])],))
        return ModelRuntime.make_item(self, ([WARMUP_ID] * shape[0],))

    def warmup_shapes(self, max_batch_size: int, max_batch_tokens: int) -> list[tuple[int, Item]]:
        """ModelRuntime.warmup_shapes for items of sequences: every length bucket (with as many
        texts as the level's count bucket), alone and in the largest batch the budget allows."""
        shapes = []
        lengths, counts = self.buckets[SEQUENCE], self.count_buckets or [0]
        for level in range(max(len(lengths), len(counts))):
            length, count = lengths[min(level, len(lengths) - 1)], counts[min(level, len(counts) - 1)]
            item = self.item_of_shape((count, length) if self.list_inputs else (length,))
            largest = max(1, min(max_batch_size, max_batch_tokens // item.tokens))
            shapes += [(size, item) for size in sorted({1, largest})]
        return shapes

    def feeds(self, items: Sequence[Item]) -> dict[str, np.ndarray]:
        """input_ids padded with the pad id, attention_mask, token_type_ids (when the graph
        reads them), (rows, L): L the items' largest bucket, rows the grid size (padding rows
        copy the first row, as ModelRuntime.feeds does). Items of a list field: K rows each (K
        the largest texts bucket), an item's empty slots copies of its first sequence."""
        n = len(items)
        shape = batch_shape(items)
        length = shape[-1]
        if self.list_inputs:
            slots = shape[0]
            sequences = [s for item in items for s in item.ids[0] + [item.ids[0][0]] * (slots - len(item.ids[0]))]
            real, rows = n * slots, self.rows(n) * slots
        else:
            sequences = [item.ids[0] for item in items]
            real, rows = n, self.rows(n)
        lengths = np.fromiter(map(len, sequences), dtype=np.intp, count=real)
        ids = np.full((rows, length), self.pad_id, dtype=np.int64)
        fill_2d(ids, sequences, lengths)  # writes each row's ids only, the pad id stays after them
        mask = np.zeros((rows, length), dtype=np.int64)
        mask[:real] = np.arange(length) < lengths[:, None]
        out = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.graph_inputs:
            types = np.zeros((rows, length), dtype=np.int64)
            fill_2d(types, [getattr(s, "type_ids", None) or [0] * len(s) for s in sequences], lengths)
            out["token_type_ids"] = types
        if rows > real:
            for arr in out.values():
                arr[real:] = arr[0]
        return out

    def _call(self, items: Sequence[Item], explain_rows: Sequence[int]) -> tuple[np.ndarray, list | None, dict[int, dict]]:
        """ModelRuntime._call; for a list field, each text's score is its sequence's one logit."""
        if not self.list_inputs:
            return super()._call(items, explain_rows)
        [logits] = self.run(self.feeds(items))
        slots = batch_shape(items)[0]
        explanations = {row: {} for row in explain_rows}
        if self.labelled:
            return (*self.decide(logits[: len(items) * slots].reshape(len(items), slots, -1), items), explanations)
        scores = logits[: len(items) * slots, 0].reshape(len(items), slots).tolist()
        per_text = [row[: len(item.ids[0])] for row, item in zip(scores, items, strict=True)]
        return None, per_text, explanations

    def decide(self, logits: np.ndarray, items: Sequence[Item]) -> tuple[np.ndarray, list[list[float]]]:
        """Verification with a pair model, context-wise (as AttConv's multi-context max): each
        evidence sentence is read against the claim on its own, and the claim takes the logits of
        the sentence that most decides it (the least P(neutral)); `evidence_scores` are the
        sentences' P(deciding), 1 - P(neutral), as shares summing to 1. `logits`: (n, K, C)."""
        chosen, shares = [], []
        for rows, item in zip(logits, items, strict=True):
            rows = rows[: len(item.ids[0])]
            deciding = 1.0 - softmax(rows)[:, self.undecided]
            chosen.append(rows[int(deciding.argmax())])
            total = deciding.sum()
            shares.append((deciding / total if total > 0 else np.full(len(rows), 1.0 / len(rows))).tolist())
        return np.stack(chosen), shares
