"""Dynamic batching for one model (TEI / Ray Serve style).

Inputs wait in ONE queue in arrival order (TEI style), a request's inputs together. A batch
takes inputs from the front while it stays within `max_batch_size` inputs and `max_batch_tokens`
padded tokens, a batch being padded to the largest bucket shape among its inputs (so shapes stay
the few warmed-up buckets; padding does not change an answer); a request's inputs may run in two
batches. Per-shape queues fragmented batches (one many-item /verify request ran as many small
engine calls).
The runtime then runs the batch in as few graph calls as pays (service.inference.runtime.plan_calls: one
call unless padding short inputs to a long one costs more than another call: less padding and
more items/s on mixed-length batches; the figures are in docs/performance.md).
A batch closes when it is full or `max_batch_delay_ms` after its oldest input arrived. Before
compute, requests whose caller went away or whose deadline passed are dropped.

The queue keeps requests, not inputs: one future per request, resolved once all its inputs'
rows are back, and a cursor of how many of its inputs batches have taken. Batches hand back
their outputs as arrays (service.inference.runtime.BatchOutput) and a request keeps references to its rows
of them, so no per-input objects, futures or callbacks are made on the event loop.

Requests submit raw inputs; tokenizing is the batcher's: everything submitted since its last
step is encoded in one call per field (service.inference.tasks.encode), in the model's inference thread,
before batches are formed from it. So the event loop only parses, checks and enqueues
(tokenizing there blocked every other request while it ran), and tokenization is
batched like inference. Requests whose caller went away or whose deadline passed are dropped
before tokenizing and again before compute.
Inference runs on a dedicated single-thread executor (onnxruntime and tokenizers release the
GIL), so the event loop keeps accepting while a batch runs. Each input receives exactly its own
row of the outputs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from service import tracing
from service.inference.errors import DeadlineExceeded, InferenceFailed, InvalidInput, QueueFull, ShuttingDown, set_by
from service.metrics import Metrics
from service.inference.runtime import BatchOutput, Item, ModelRuntime, padded_shape
from service.settings import Settings
from service.inference.tasks import encode

log = logging.getLogger("service.inference.batcher")


@dataclass(frozen=True)
class Done:
    """A request's answers and where its time went. `parts`, in input order: (its first input
    there, the output of a batch, that input's row in it, how many of its inputs follow it
    there); a request runs in one batch, or in a few when it did not fit the rest of one."""

    parts: list[tuple[int, BatchOutput, int, int]]
    truncated: list[bool]  # per input: a text of it was cut to the model's max length
    unknown_share: list[float]  # per input: share of the tokens read that are outside the vocabulary
    tokens: list[dict | None]  # per input, explain: the tokens the model read and counts of the cut ones (service.inference.tasks.token_ids)
    queue_s: float  # the longest any of its inputs waited for its batch (tokenizing included)
    inference_s: float  # onnxruntime time of the batches its inputs ran in, summed


class _Request:
    """A request's inputs in the queue: before tokenizing `items` is None; then `taken` of its
    items have gone into batches, and `finished` of them are back."""

    __slots__ = ("inputs", "batch", "explain", "future", "enqueued", "deadline", "items", "max_shape", "truncated",
                 "unknown_share", "tokens", "taken", "finished", "parts", "queue_s", "inference_s", "trace")

    def __init__(self, inputs: Sequence[Any], batch: bool, explain: bool, future: asyncio.Future, enqueued: float,
                 deadline: float) -> None:
        self.inputs, self.batch, self.explain, self.future = inputs, batch, explain, future
        self.enqueued, self.deadline = enqueued, deadline  # loop.time()
        self.items: list[Item] | None = None
        self.max_shape: tuple[int, ...] = ()  # the bucket shape that holds every item of it
        self.truncated: list[bool] = []
        self.unknown_share: list[float] = []
        self.tokens: list[dict | None] = []
        self.taken = self.finished = 0
        self.parts: list[tuple[int, BatchOutput, int, int]] = []
        self.queue_s = self.inference_s = 0.0
        self.trace = tracing.enqueued()  # the request's trace (service.tracing); None unless traced

    def where(self, i: int) -> str:
        """Input i's place in the request, for an error message ("inputs[3]")."""
        return f"inputs[{i}]" if self.batch else "input"


# A batch: (request, its first input in the batch, how many of its inputs), in queue order.
Segment = tuple[_Request, int, int]


class Batcher:
    def __init__(self, runtime: ModelRuntime, settings: Settings, metrics: Metrics) -> None:
        self.runtime = runtime
        self.name = runtime.name
        self.max_batch_size = runtime.inputs_per_call(settings.max_batch_size)
        self.max_batch_tokens = settings.max_batch_tokens
        self.max_delay_s = settings.max_batch_delay_ms / 1000.0
        self.max_queue = settings.max_queue
        self.metrics = metrics
        self._submitted: list[_Request] = []
        self._queue: deque[_Request] = deque()
        self._count = 0  # inputs submitted or queued, not yet in a batch
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"ort-{self.name}")
        self._task: asyncio.Task | None = None
        self._closing = False
        self._batches = 0
        # this model's series, resolved once (labels() takes a lock and validates each call)
        self._depth = metrics.queue_depth.labels(model=self.name)
        self._depth.set(0)
        self._queue_wait = metrics.queue_wait.labels(model=self.name)
        self._inference_duration = metrics.inference_duration.labels(model=self.name)
        self._batch_size = metrics.batch_size.labels(model=self.name)
        self._batch_tokens = metrics.batch_tokens.labels(model=self.name)
        self._graph_calls = metrics.graph_calls.labels(model=self.name)
        self._dropped = {reason: metrics.dropped.labels(model=self.name, reason=reason)
                         for reason in ("cancelled", "deadline")}

    # --- caller side ----------------------------------------------------------------------

    @property
    def depth(self) -> int:
        return self._count

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"batcher-{self.name}")

    def check_room(self, count: int) -> None:
        """503 while closing, 429 when `count` more items would not fit the queue. Engine.check
        calls it before the text checks and any tokenizing, so shed requests cost little."""
        if self._closing:
            raise ShuttingDown("the server is shutting down", headers={"Retry-After": "1"})
        if self._count + count > self.max_queue:
            raise QueueFull(
                f"model {self.name!r} has {self._count} items queued, at most {self.max_queue} "
                f"{set_by('max_queue')}; retry later",
                headers={"Retry-After": "1"},
            )

    def submit(self, inputs: Sequence[Any], deadline: float, *, batch: bool = False,
               explain: bool = False) -> asyncio.Future:
        """Queue a request's inputs (objects with the task's fields) together. Their room is
        checked once, by the caller, with no await between (Engine.enqueue through Engine.check,
        `check_room`). The future gets a Done (with `explain`, carrying each input's tokens and
        explanation), or InvalidInput naming the first input with no tokens (`inputs[i]` when `batch`)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not inputs:
            future.set_result(Done([], [], [], [], 0.0, 0.0))
            return future
        self._submitted.append(_Request(inputs, batch, explain, future, loop.time(), deadline))
        self._count += len(inputs)
        self._depth.set(self._count)
        self._wakeup.set()
        return future

    async def drain(self, timeout_s: float) -> None:
        """Stop taking items, run what is queued (without waiting out batch delays), then stop.
        Items still queued after `timeout_s` fail with 503."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=max(0.0, timeout_s))
            except asyncio.TimeoutError:
                if self._count:
                    # only a drain that leaves work undone is an error worth a page
                    log.error("drain timed out", extra={"model": self.name, "queued": self._count})
                self._task.cancel()
        leftover = [*self._submitted, *self._queue]
        self._submitted.clear()
        self._queue.clear()
        for request in leftover:
            if not request.future.done():
                request.future.set_exception(ShuttingDown("the server shut down before this input ran"))
        self._count = 0
        self._depth.set(0)
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- batch loop -----------------------------------------------------------------------

    def _take(self) -> tuple[list[Segment], bool]:
        """The front batch: inputs from the front while n <= max_batch_size and padded shape x n
        <= max_batch_tokens (the first input always runs, even over budget), and whether it is
        full (nothing more would fit). A request whose remaining inputs all fit, at the shape
        that holds all of it, is taken whole without looking at each input."""
        runtime, size_limit, budget = self.runtime, self.max_batch_size, self.max_batch_tokens
        segments: list[Segment] = []
        shape: tuple[int, ...] | None = None
        n = 0
        for request in self._queue:
            items, start = request.items, request.taken
            left = len(items) - start
            whole = request.max_shape if shape is None else padded_shape(shape, request.max_shape)
            if n + left <= size_limit and runtime.shape_tokens(whole) * (n + left) <= budget:
                segments.append((request, start, left))
                shape, n = whole, n + left
                continue
            count, stopped = 0, False
            for item in items[start:]:
                if shape is None:
                    grown = item.shape
                elif n >= size_limit:
                    stopped = True
                    break
                else:
                    grown = padded_shape(shape, item.shape)
                    if runtime.shape_tokens(grown) * (n + 1) > budget:
                        stopped = True
                        break
                shape, n, count = grown, n + 1, count + 1
            if count:
                segments.append((request, start, count))
            if stopped:  # the next input does not fit
                return segments, True
        return segments, n >= size_limit

    def _next_batch(self, now: float) -> tuple[list[Segment] | None, float]:
        """The front batch when it is ready, else (None, when it closes)."""
        if not self._queue:
            return None, math.inf
        close_at = self._queue[0].enqueued + self.max_delay_s
        segments, full = self._take()
        if self._closing or close_at <= now or full:
            return segments, close_at
        return None, close_at

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._count == 0:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self._submitted:
                try:
                    await self._tokenize()
                except Exception:  # the loop must outlive any one step
                    log.exception("tokenizing failed", extra={"model": self.name})
                continue
            segments, next_close = self._next_batch(loop.time())
            if segments is None:
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), timeout=max(0.0, next_close - loop.time()))
                except asyncio.TimeoutError:
                    pass
                continue
            for request, start, count in segments:
                request.taken = start + count
            while self._queue and self._queue[0].taken == len(self._queue[0].items):
                self._queue.popleft()
            self._count -= sum(count for _, _, count in segments)
            self._depth.set(self._count)
            try:
                await self._run(segments)
            except Exception:  # the loop must outlive any one batch
                log.exception("batch failed", extra={"model": self.name})

    def _still_wanted(self, request: _Request, count: int, now: float) -> bool:
        """Whether the request's caller is still waiting and its deadline has not passed; if
        not, its `count` inputs here are counted as dropped (and an expired request answered 504)."""
        if request.future.done():  # caller cancelled (disconnect or its own timeout)
            self._dropped["cancelled"].inc(count)
            return False
        if now >= request.deadline:
            self._dropped["deadline"].inc(count)
            request.future.set_exception(DeadlineExceeded("the request deadline passed while it was queued"))
            return False
        return True

    def _encode(self, requests: list[_Request]) -> list:
        """service.inference.tasks.encode over every input of `requests` (the inference thread)."""
        inputs = [x for r in requests for x in r.inputs]
        explain = [r.explain for r in requests for _ in r.inputs]
        return encode(self.runtime, inputs, explain)

    async def _tokenize(self) -> None:
        """Everything submitted since the last step, tokenized in one go in the inference
        thread, joins the queue in arrival order."""
        loop = asyncio.get_running_loop()
        submitted, self._submitted = self._submitted, []
        now = loop.time()
        live: list[_Request] = []
        for request in submitted:
            if self._still_wanted(request, len(request.inputs), now):
                live.append(request)
            else:
                self._count -= len(request.inputs)
        self._depth.set(self._count)
        if not live:
            return
        tokenize_began = time.time_ns()  # for traced requests' tokenize spans
        try:
            encoded = await loop.run_in_executor(self._executor, self._encode, live)
        except Exception as exc:
            log.exception("tokenizing failed", extra={"model": self.name, "inputs": sum(len(r.inputs) for r in live)})
            for request in live:
                self._count -= len(request.inputs)
                if not request.future.done():
                    request.future.set_exception(InferenceFailed(f"tokenizing failed: {type(exc).__name__}"))
            self._depth.set(self._count)
            return
        at = 0
        for request in live:
            mine = encoded[at : at + len(request.inputs)]
            at += len(request.inputs)
            bad = next((i for i, e in enumerate(mine) if e.item is None), None)
            if request.future.done():  # the caller left while its inputs were tokenized
                self._count -= len(request.inputs)
                self._dropped["cancelled"].inc(len(request.inputs))
                continue
            if bad is not None:
                self._count -= len(request.inputs)
                request.future.set_exception(InvalidInput(f"{request.where(bad)}: {mine[bad].error}"))
                continue
            request.items = items = [e.item for e in mine]
            shape = items[0].shape
            for item in items[1:]:
                if item.shape != shape:
                    shape = padded_shape(shape, item.shape)
            request.max_shape = shape
            request.truncated = [e.truncated for e in mine]
            request.unknown_share = [e.unknown_share for e in mine]
            request.tokens = [e.tokens for e in mine]
            if request.trace is not None:
                request.trace.tokenized(tokenize_began)
            self._queue.append(request)
        self._depth.set(self._count)

    def _infer(self, items: list[Item], explain_rows: list[int]) -> tuple[BatchOutput, int, int, float]:
        """The batch's outputs, its graph calls and padded tokens, and its onnxruntime time in
        seconds (the inference thread)."""
        t0 = time.perf_counter()
        output, calls = self.runtime.run_batch(items, explain_rows)
        seconds = time.perf_counter() - t0
        return output, len(calls), self.runtime.padded_tokens(items, calls), seconds

    async def _run(self, segments: list[Segment]) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        live = [s for s in segments if self._still_wanted(s[0], s[2], start)]
        if not live:
            return
        items: list[Item] = []
        explain_rows: list[int] = []
        for request, first, count in live:
            wait = start - request.enqueued
            for _ in range(count):
                self._queue_wait.observe(wait)
            if request.explain:  # the explanation output is fetched only when an input of this batch asked for it
                explain_rows += range(len(items), len(items) + count)
            items += request.items[first : first + count]
        self._batches += 1
        try:
            output, calls, tokens, inference_s = await loop.run_in_executor(self._executor, self._infer, items,
                                                                            explain_rows)
        except Exception as exc:
            log.exception("inference failed", extra={"model": self.name, "batch_size": len(items)})
            for request, _, _ in live:
                if not request.future.done():
                    request.future.set_exception(InferenceFailed(f"inference failed: {type(exc).__name__}"))
            return
        self._inference_duration.observe(inference_s)
        self._batch_size.observe(len(items))
        self._batch_tokens.observe(tokens)
        self._graph_calls.inc(calls)
        traced = [request.trace for request, _, _ in live if request.trace is not None]
        if traced:  # the batch's span, linked to each traced request's
            tracing.batch_ran(traced, self.name, len(items), inference_s)
        row = 0
        for request, first, count in live:
            request.parts.append((first, output, row, count))
            row += count
            request.finished += count
            request.queue_s = max(request.queue_s, start - request.enqueued)
            request.inference_s += inference_s
            if request.finished == len(request.items) and not request.future.done():
                request.future.set_result(Done(request.parts, request.truncated, request.unknown_share,
                                               request.tokens, request.queue_s, request.inference_s))
