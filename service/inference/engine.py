"""One model's engine, in the spirit of text-embeddings-inference's `Infer` + `Queue`: the
runtime, its queue (service.inference.batcher) and the task adapter (service.inference.tasks), behind one call.

    engine = Engine(runtime, settings, metrics)
    engine.start()                                   # in the event loop that will submit
    answers = await engine.submit(inputs, deadline=loop.time() + 1.0)
    answers.results[i]  # {"label", "scores", "model", "truncated", "unknown_token_share"[, "evidence_scores"][, "explanation"]}

An input is any object with the task's fields as attributes (service.inference.tasks). `submit` checks
the model's limits and the texts (4xx errors from service.inference.errors, before any tokenizing),
queues the inputs in arrival order, waits for their own rows of the batches they ran in, and
renders the answers. The HTTP routes (task API and Open Inference Protocol) only parse, call
the engine and return; the bench's in-process baseline (bench.engine) and the tests drive the
same object, so what the bench compares the service with is this code with no HTTP in front.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Sequence

from core.tasks import TASKS
from service.inference.batcher import Batcher, Done
from service.inference.errors import ClientClosed, DeadlineExceeded, TooManyEvidence, TooManyInputs, set_by
from service.metrics import Metrics
from service.inference.runtime import ModelRuntime
from service.settings import Settings
from service.inference.tasks import check_texts

# A labelled task's per-text output (evidence_scores) is float32 from the graph: 6 decimals, not
# float32's noise printed as a double (0.009999999776482582 for 0.01). A reranker's per-text
# output is its scores' raw material, left as it is.
PER_TEXT_DECIMALS = 6


@dataclass(frozen=True)
class Answers:
    """A request's answers, in input order, and where its time went."""

    results: list[dict]
    queue_s: float  # the longest any of its inputs waited for its batch (tokenizing included)
    inference_s: float  # onnxruntime time of the batches its inputs ran in, summed


@dataclass(frozen=True)
class Pending:
    """Queued inputs: the request's future (one, for all its inputs; a list for the callers
    that cancel or check it)."""

    futures: list[asyncio.Future]


def warm_up(runtime: ModelRuntime, settings: Settings) -> float:
    """Turn the batch grid on or off for the runtime's provider (settings.batch_grid_for), run
    every shape the batching policy can produce (settings' max batch size and token budget;
    with the grid, every grid shape) once, and measure the cost of a graph call unless
    configured; seconds taken. The service (before a model is ready) and the bench's in-process
    engine warm up through here."""
    max_batch_size = runtime.inputs_per_call(settings.max_batch_size)
    runtime.use_batch_grid(max_batch_size if settings.batch_grid_for(runtime.provider) else None)
    return runtime.warmup(max_batch_size, settings.max_batch_tokens, settings.call_overhead_tokens)


# a request still waiting after this long starts watching for its client's disconnect
WATCH_AFTER_S = 0.02


class Engine:
    def __init__(self, runtime: ModelRuntime, settings: Settings, metrics: Metrics) -> None:
        self.runtime = runtime
        self.name = runtime.name
        self.config = runtime.config
        self.task = TASKS[self.config.task]
        self.settings = settings
        self.batcher = Batcher(runtime, settings, metrics)
        self._truncated = metrics.truncated_inputs.labels(model=self.name)

    @property
    def depth(self) -> int:
        """Inputs queued (tokenized or not) and not yet running."""
        return self.batcher.depth

    def start(self) -> None:
        self.batcher.start()

    async def drain(self, timeout_s: float) -> None:
        await self.batcher.drain(timeout_s)

    # --- submitting -----------------------------------------------------------------------

    def check(self, inputs: Sequence[Any], batch: bool = False) -> None:
        """The checks before any work on the texts, cheapest first: inputs per request,
        evidence per claim, room in the queue (429: a shed request should cost as little as
        possible), then the text limits. `batch` names inputs as `inputs[i]` in messages."""
        listed = self.task.list_field
        counts = () if listed is None else (
            (f"inputs[{i}].{listed.name}" if batch else listed.name, len(getattr(x, listed.name))) for i, x in enumerate(inputs))
        self.check_sizes(len(inputs), counts)
        self.batcher.check_room(len(inputs))
        check_texts(inputs, self.task.name, batch, self.settings.max_text_chars, self.settings.max_request_chars)

    def check_sizes(self, n: int, evidence: Iterable[tuple[str, int]] = ()) -> None:
        """422 for more than `max_inputs_per_request` inputs, or for a claim with more evidence
        than the model takes (`evidence`: where, how many); the counts alone, so a caller can
        check what a request declares before building anything from it (service.http.oip)."""
        if n > self.settings.max_inputs_per_request:
            raise TooManyInputs(f"{n} inputs; at most {self.settings.max_inputs_per_request} per request "
                                f"{set_by('max_inputs_per_request')}; or send them in several requests")
        limit = self.config.max_evidence
        for where, count in evidence:
            if count > limit:
                raise TooManyEvidence(f"{where}: {count} items; model {self.name!r} takes at most {limit} (its "
                                      "max_evidence, fixed in its config.json when it was exported: no ATTSERVE_ "
                                      f"setting raises it; /v1/models lists each model's); {self.task.list_field.too_many}")

    def enqueue(self, inputs: Sequence[Any], *, deadline: float, batch: bool = False,
                explain: bool = False) -> Pending:
        """Check `inputs` and queue them, together or not at all; `deadline` is in
        loop.time(). The batcher tokenizes them in the inference thread. `check` is the only
        room check: nothing awaits between it and the queueing."""
        self.check(inputs, batch)
        if asyncio.get_running_loop().time() >= deadline:
            raise DeadlineExceeded(f"no answer within {self.settings.request_timeout_ms:.0f} ms "
                                   f"{set_by('request_timeout_ms')}")
        return Pending([self.batcher.submit(inputs, deadline=deadline, batch=batch, explain=explain)])

    async def answers(self, pending: Pending, *, deadline: float,
                      cancel_when: Awaitable[Any] | Callable[[], Awaitable[Any]] | None = None) -> Answers:
        """Wait for queued inputs and render their answers. Raises an input's own error
        (InvalidInput for a text with no tokens, 504 for one that expired in the queue),
        DeadlineExceeded at `deadline`, or ClientClosed when `cancel_when` (say, the client's
        disconnect; an awaitable, or a function that makes one) completes first. However it
        ends, inputs not yet run are cancelled, so the batcher skips them.

        Cheap per request, since single-item traffic is bound by it: one future for all the
        request's inputs (the batcher resolves it when their last row is back), one waiter
        future woken by a done-callback (what asyncio.wait builds, without its sets and extra
        callbacks), the deadline a loop timer, and the `cancel_when` watcher (a task) started
        only for a request still waiting after WATCH_AFTER_S, so a departed client is noticed
        that much later at worst and most requests never make one."""
        loop = asyncio.get_running_loop()
        [outcome] = pending.futures
        waiter = loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        watcher: asyncio.Future | None = None

        def watch() -> None:
            nonlocal watcher
            watcher = asyncio.ensure_future(cancel_when() if callable(cancel_when) else cancel_when)
            watcher.add_done_callback(wake)

        outcome.add_done_callback(wake)
        timers = [loop.call_at(deadline, wake)]
        if cancel_when is not None:
            timers.append(loop.call_later(WATCH_AFTER_S, watch))
        try:
            await waiter
            if outcome.done():
                done: Done = outcome.result()  # raises an input's error
            elif watcher is not None and watcher.done():
                raise ClientClosed("the client disconnected before the answer was ready")
            else:
                raise DeadlineExceeded(f"no answer within {self.settings.request_timeout_ms:.0f} ms "
                                       f"{set_by('request_timeout_ms')}")
        finally:
            for timer in timers:
                timer.cancel()
            outcome.remove_done_callback(wake)
            if watcher is not None:
                watcher.cancel()
            elif asyncio.iscoroutine(cancel_when):
                cancel_when.close()  # never started: no "coroutine was never awaited"
            outcome.cancel()  # a cancelled request is skipped by the batcher
        return self.render(done)

    async def submit(self, inputs: Sequence[Any], *, deadline: float, batch: bool = False, explain: bool = False,
                     cancel_when: Awaitable[Any] | Callable[[], Awaitable[Any]] | None = None) -> Answers:
        """enqueue + answers: the whole path of a request's inputs through this model."""
        pending = self.enqueue(inputs, deadline=deadline, batch=batch, explain=explain)
        return await self.answers(pending, deadline=deadline, cancel_when=cancel_when)

    # --- answers --------------------------------------------------------------------------

    def render(self, done: Done) -> Answers:
        """The answer of each input: label, scores by label, the model, whether a text was
        cut to the max length, the share of its tokens outside the vocabulary; evidence scores
        for claims; the explanation when asked for. Built a batch's rows at a time from its
        outputs (service.inference.runtime.BatchOutput)."""
        labels = self.config.labels
        name = self.name
        per_text = self.task.per_text  # verification: "evidence_scores"
        truncated = sum(done.truncated)
        if truncated:
            self._truncated.inc(truncated)
        results: list[dict] = []
        for first, output, row, count in done.parts:
            flags = done.truncated[first : first + count]
            shares = done.unknown_share[first : first + count]
            if self.task.labelled:
                best = output.label_index[row : row + count]
                probs = output.probs[row : row + count]
                part = [{"label": labels[k], "scores": dict(zip(labels, p)), "model": name, "truncated": t,
                         "unknown_token_share": u} for k, p, t, u in zip(best, probs, flags, shares)]
            else:
                part = [{"model": name, "truncated": t, "unknown_token_share": u} for t, u in zip(flags, shares)]
            if per_text is not None:
                for answer, scores in zip(part, output.per_text[row : row + count]):
                    answer[per_text] = [round(s, PER_TEXT_DECIMALS) for s in scores] if self.task.labelled else scores
            if any(t is not None for t in done.tokens[first : first + count]):
                spec = self.config.explanation
                for k, answer in enumerate(part):
                    tokens = done.tokens[first + k]
                    if tokens is not None:
                        answer["explanation"] = {"method": spec.method if spec is not None else None, **tokens,
                                                 **output.explanations[row + k]}
            results += part
        return Answers(results, done.queue_s, done.inference_s)
