"""The one path from a validated request to its answers, for every protocol: the task
endpoints and their hot path (service.http.routes, service.http.entry), the Open Inference
Protocol (service.http.oip), /zero-shot and /tokenize. No ASGI here: the caller hands in the
request's arrival time and a way to learn that its client left, and gets back the load that
answered (its name and version label the metrics).

    entry = admit(service, model, task, version)       # 503 while draining, then resolve
    ran = await run(service, entry, inputs, endpoint=..., batch=..., arrival=..., cancel=...)

Each check runs once per request: the drain and the model's resolution in `admit`, the
engine's checks (counts, room in the queue, text limits) in `Engine.enqueue`. A request with
explanations is the one exception: its explanation floor is computed in a thread, after which
the engine checks it again, since meanwhile the queue filled or the model was reloaded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from service import tracing
from service.inference.answer_size import explanation_floor
from service.inference.errors import AnswerTooLarge, ShuttingDown, UnknownModel, set_by
from service.inference.registry import ModelEntry, Service


@dataclass(frozen=True, slots=True)
class Ran:
    """A request's answers, in input order, the load that gave them and where the time went."""

    results: list[dict]
    entry: ModelEntry  # its name and version label the request's metrics and X-Attserve-Model-Version
    queue_s: float
    inference_s: float


def admit(service: Service, model: str | None, task: str, version: str | None = None,
          resolved: ModelEntry | None = None) -> ModelEntry:
    """The load that serves a request for `model` (None: the task's default) of `task`: 503
    while the server drains, else `service.resolve`'s answer or its errors; `resolved`: the load
    the response cache's raw lookup admitted for this very request (through here: the drain
    checked and a canary's share drawn once), returned as it is."""
    if resolved is not None:
        return resolved
    if service.draining:
        raise ShuttingDown("the server is shutting down", headers={"Retry-After": "1"})
    entry = service.resolve(model, task, version)
    trace = tracing.current()
    if trace is not None:
        trace.resolved(entry)
    return entry


async def run(service: Service, entry: ModelEntry, inputs: Sequence[Any], *, endpoint: str, batch: bool,
              arrival: float | None, cancel: Callable[[], Awaitable[Any]] | None, explain: bool = False,
              version: str | None = None) -> Ran:
    """Runs `inputs` (objects with the task's fields as attributes) on `entry` (from `admit`),
    or on the load that replaced it meanwhile. The deadline runs from `arrival` (loop.time() of
    the request's first byte; None: now), so reading, parsing, tokenizing and queueing count;
    `cancel` makes an awaitable that completes when the client goes away (499 then);
    `endpoint` labels the inputs metric."""
    entry = current_load(service, entry, version)
    loop = asyncio.get_running_loop()
    deadline = (loop.time() if arrival is None else arrival) + service.settings.request_timeout_ms / 1000.0
    if explain:
        await refuse_too_large_explanations(service, entry, inputs, batch)
        entry = current_load(service, entry, version)  # reloaded meanwhile
    pending = entry.engine.enqueue(inputs, deadline=deadline, batch=batch, explain=explain)
    service.metrics.series(service.metrics.inputs, endpoint, entry.name).inc(len(inputs))
    answers = await entry.engine.answers(pending, deadline=deadline, cancel_when=cancel)
    return Ran(answers.results, entry, answers.queue_s, answers.inference_s)


def current_load(service: Service, entry: ModelEntry, version: str | None) -> ModelEntry:
    """The load that serves a request that resolved `entry` (naming `version`, or none): `entry`
    itself; when it was reloaded since (service.inference.model_control), the load that replaced
    it; when its version was unloaded, the model's default now for a request that named no
    version, and 422 unknown_model for one that named it."""
    while entry.retired:
        if entry.replaced_by is not None:
            entry = entry.replaced_by
        elif version is None:
            entry = service.resolve(entry.name, entry.task)
        else:
            raise UnknownModel(f"model {entry.name!r} version {entry.version!r} was unloaded while the request "
                               "waited; send it again")
    return entry


async def refuse_too_large_explanations(service: Service, entry: ModelEntry, inputs: Sequence[Any],
                                        batch: bool) -> None:
    """AnswerTooLarge before any inference when the explanations of `inputs` cannot fit in
    max_answer_bytes (service.inference.answer_size), after the engine's own checks of the
    request (counts, text limits), so what it refuses is refused as without explanations. The
    floor tokenizes, in a thread."""
    entry.engine.check(inputs, batch)
    floor = await asyncio.to_thread(explanation_floor, entry.engine.runtime, inputs)
    limit = service.settings.max_answer_bytes
    if floor > limit:
        raise AnswerTooLarge(f"the answer with explanations would be at least {floor} bytes, over {limit} "
                             f"{set_by('max_answer_bytes')}; send fewer inputs per request with \"explain\": true, "
                             "or fewer or shorter texts")
