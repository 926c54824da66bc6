"""Dynamic batching for one model (TEI / Ray Serve style).

Items (one per input; a multi-input request submits several, each with its own future) wait
in ONE queue in arrival order (TEI style). A batch takes items from the front while it stays
within `max_batch_size` items and `max_batch_tokens` padded tokens, a batch being padded to the
largest bucket shape among its items (so shapes stay the few warmed-up buckets; padding does
not change an answer). Per-shape queues fragmented batches (a 32-item /verify request ran as
~15 engine calls). The runtime then runs the batch in as few graph calls as pays
(service.runtime.plan_calls: one call unless padding short items to a long one costs more than
another call; 32-item SNLI batches: 1.8x padding in one call, 2-3 calls and 1.2x padding when
planned, 1.4-2.3x the items/s).
A batch closes when it is full or `max_batch_delay_ms` after its oldest item arrived. Before compute, items whose caller went away or whose deadline passed are dropped.

Requests submit raw inputs; tokenizing is the batcher's: everything submitted since its last
step is encoded in one `encode_batch` per field (service.tasks.encode), in the model's
inference thread, before batches are formed from it. So the event loop only parses, checks
and enqueues (tokenizing there cost ~0.17 ms a text and blocked every other request), and
tokenization is batched like inference. Items whose caller went away or whose deadline passed
are dropped before tokenizing and again before compute.
Inference runs on a dedicated single-thread executor (onnxruntime and tokenizers release the
GIL), so the event loop keeps accepting while a batch runs. Each item's future receives
exactly its own row of the outputs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

from service.errors import DeadlineExceeded, InferenceFailed, InvalidInput, QueueFull, ShuttingDown, set_by
from service.metrics import Metrics
from service.runtime import Item, ItemOutput, ModelRuntime, padded_shape
from service.settings import Settings
from service.tasks import encode

log = logging.getLogger("service.batcher")


@dataclass(frozen=True)
class Done:
    """An item's answer and where its time went."""

    output: ItemOutput
    queue_s: float
    inference_s: float
    batch_id: int
    truncated: bool  # a text of this input was cut to the model's max length
    tokens: dict | None = None  # explain: the tokens the model read and counts of the cut ones (service.tasks.token_ids)
    unknown_share: float = 0.0  # share of the tokens read that are outside the vocabulary


@dataclass
class _Submitted:
    """An input not yet tokenized."""

    input: Any
    where: str  # its place in the request, for an error message ("inputs[3]")
    future: asyncio.Future
    enqueued: float  # loop.time()
    deadline: float  # loop.time()
    explain: bool = False


@dataclass
class _Waiting:
    item: Item
    future: asyncio.Future
    enqueued: float  # loop.time()
    deadline: float  # loop.time()
    truncated: bool = False
    tokens: dict | None = None  # set when the caller asked for an explanation
    unknown_share: float = 0.0


@dataclass
class _State:
    submitted: list[_Submitted] = field(default_factory=list)
    queue: deque[_Waiting] = field(default_factory=deque)
    count: int = 0  # submitted + queued


class Batcher:
    def __init__(self, runtime: ModelRuntime, settings: Settings, metrics: Metrics) -> None:
        self.runtime = runtime
        self.name = runtime.name
        self.max_batch_size = settings.max_batch_size
        self.max_batch_tokens = settings.max_batch_tokens
        self.max_delay_s = settings.max_batch_delay_ms / 1000.0
        self.max_queue = settings.max_queue
        self.metrics = metrics
        self._state = _State()
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

    # --- caller side ----------------------------------------------------------------------

    @property
    def depth(self) -> int:
        return self._state.count

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"batcher-{self.name}")

    def check_room(self, count: int) -> None:
        """503 while closing, 429 when `count` more items would not fit the queue. Routes call
        it before tokenizing too, so shed requests cost no tokenization."""
        if self._closing:
            raise ShuttingDown("the server is shutting down", headers={"Retry-After": "1"})
        if self._state.count + count > self.max_queue:
            raise QueueFull(
                f"model {self.name!r} has {self._state.count} items queued, at most {self.max_queue} "
                f"{set_by('max_queue')}; retry later",
                headers={"Retry-After": "1"},
            )

    def submit(self, inputs: Sequence[Any], deadline: float, places: Sequence[str] | None = None,
               explain: bool = False) -> list[asyncio.Future]:
        """Queue a request's inputs (objects with the task's fields, checked by the route)
        together or not at all (429 when they do not all fit). Each future gets a Done (with
        `explain`, carrying the tokens and the output's explanation), or InvalidInput naming
        `places[i]` when the input has no tokens."""
        self.check_room(len(inputs))
        loop = asyncio.get_running_loop()
        now = loop.time()
        futures = []
        for i, x in enumerate(inputs):
            future = loop.create_future()
            where = places[i] if places is not None else "input"
            self._state.submitted.append(_Submitted(x, where, future, now, deadline, explain))
            futures.append(future)
        self._state.count += len(inputs)
        self._depth.set(self._state.count)
        self._wakeup.set()
        return futures

    async def drain(self, timeout_s: float) -> None:
        """Stop taking items, run what is queued (without waiting out batch delays), then stop.
        Items still queued after `timeout_s` fail with 503."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=max(0.0, timeout_s))
            except asyncio.TimeoutError:
                if self._state.count:
                    # only a drain that leaves work undone is an error worth a page
                    log.error("drain timed out", extra={"model": self.name, "queued": self._state.count})
                self._task.cancel()
        leftover = [*self._state.submitted, *self._state.queue]
        self._state.submitted.clear()
        self._state.queue.clear()
        for waiting in leftover:
            if not waiting.future.done():
                waiting.future.set_exception(ShuttingDown("the server shut down before this input ran"))
        self._state.count = 0
        self._depth.set(0)
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- batch loop -----------------------------------------------------------------------

    def _take_count(self, queue: deque[_Waiting]) -> int:
        """Items from the front while n <= max_batch_size and padded shape x n <= max_batch_tokens
        (the first item always runs, even over budget)."""
        shape = queue[0].item.shape
        n = 1
        while n < len(queue) and n < self.max_batch_size:
            grown = padded_shape(shape, queue[n].item.shape)
            if self.runtime.shape_tokens(grown) * (n + 1) > self.max_batch_tokens:
                break
            shape, n = grown, n + 1
        return n

    def _next_batch(self, now: float) -> tuple[deque[_Waiting] | None, float]:
        """The queue when its front batch is ready, else (None, when it closes)."""
        queue = self._state.queue
        if not queue:
            return None, math.inf
        close_at = queue[0].enqueued + self.max_delay_s
        if self._closing or close_at <= now:
            return queue, close_at
        n = self._take_count(queue)
        if n >= self.max_batch_size or n < len(queue):  # full: nothing more would fit
            return queue, close_at
        return None, close_at

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._state.count == 0:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self._state.submitted:
                try:
                    await self._tokenize()
                except Exception:  # the loop must outlive any one step
                    log.exception("tokenizing failed", extra={"model": self.name})
                continue
            queue, next_close = self._next_batch(loop.time())
            if queue is None:
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), timeout=max(0.0, next_close - loop.time()))
                except asyncio.TimeoutError:
                    pass
                continue
            taken = [queue.popleft() for _ in range(self._take_count(queue))]
            self._state.count -= len(taken)
            self._depth.set(self._state.count)
            try:
                await self._run(taken)
            except Exception:  # the loop must outlive any one batch
                log.exception("batch failed", extra={"model": self.name})

    def _still_wanted(self, entries: Sequence[Any], now: float) -> list:
        """Entries (_Submitted or _Waiting) whose caller is still waiting and whose deadline has
        not passed; the others are counted as dropped (and an expired one is answered 504)."""
        live = []
        for entry in entries:
            if entry.future.done():  # caller cancelled (disconnect or its own timeout)
                self.metrics.dropped.labels(model=self.name, reason="cancelled").inc()
            elif now >= entry.deadline:
                self.metrics.dropped.labels(model=self.name, reason="deadline").inc()
                entry.future.set_exception(DeadlineExceeded("the request deadline passed while it was queued"))
            else:
                live.append(entry)
        return live

    async def _tokenize(self) -> None:
        """Everything submitted since the last step, tokenized in one go in the inference
        thread, joins the queue in arrival order."""
        loop = asyncio.get_running_loop()
        submitted, self._state.submitted = self._state.submitted, []
        live: list[_Submitted] = self._still_wanted(submitted, loop.time())
        self._state.count -= len(submitted) - len(live)
        self._depth.set(self._state.count)
        if not live:
            return
        try:
            encoded = await loop.run_in_executor(self._executor, encode, self.runtime, [s.input for s in live],
                                                 [s.explain for s in live])
        except Exception as exc:
            log.exception("tokenizing failed", extra={"model": self.name, "inputs": len(live)})
            for s in live:
                self._state.count -= 1
                if not s.future.done():
                    s.future.set_exception(InferenceFailed(f"tokenizing failed: {type(exc).__name__}"))
            self._depth.set(self._state.count)
            return
        for s, e in zip(live, encoded, strict=True):
            if e.item is None:
                self._state.count -= 1
                if not s.future.done():
                    s.future.set_exception(InvalidInput(f"{s.where}: {e.error}"))
            else:
                self._state.queue.append(_Waiting(e.item, s.future, s.enqueued, s.deadline, e.truncated, e.tokens,
                                                  e.unknown_share))
        self._depth.set(self._state.count)

    async def _run(self, taken: list[_Waiting]) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        live: list[_Waiting] = self._still_wanted(taken, start)
        if not live:
            return
        for waiting in live:
            self._queue_wait.observe(start - waiting.enqueued)
        items = [w.item for w in live]
        self._batches += 1
        batch_id = self._batches
        t0 = time.perf_counter()
        try:
            # the explanation output is fetched only when an item of this batch asked for it
            explain_rows = [row for row, w in enumerate(live) if w.tokens is not None]
            outputs, calls = await loop.run_in_executor(self._executor, self.runtime.infer_batch, items, explain_rows)
        except Exception as exc:
            log.exception("inference failed", extra={"model": self.name, "batch_size": len(items)})
            for waiting in live:
                if not waiting.future.done():
                    waiting.future.set_exception(InferenceFailed(f"inference failed: {type(exc).__name__}"))
            return
        inference_s = time.perf_counter() - t0
        self._inference_duration.observe(inference_s)
        self._batch_size.observe(len(items))
        self._batch_tokens.observe(self.runtime.padded_tokens(items, calls))
        self._graph_calls.inc(len(calls))
        for waiting, output in zip(live, outputs, strict=True):
            if not waiting.future.done():
                waiting.future.set_result(Done(output, start - waiting.enqueued, inference_s, batch_id, waiting.truncated,
                                               waiting.tokens, waiting.unknown_share))
