"""HTTP routes. An inference request is parsed and validated (schemas) and handed to the
dataplane (service.inference.dataplane: admit, then run on its model's engine, which checks it
against the model's limits and the text limits, queues one item per input - the batcher
tokenizes, in its inference thread - and renders the answers from the request's own rows only).
`admit_request` and `run_request` are the dataplane for an HTTP request (its state, its
disconnect): every inference route calls them.

Truncation is reported per result: `truncated: true` when any text of that input was cut to
the model's max length (and counted in `attserve_truncated_inputs_total`).
Timing headers (ms, as TEI): `x-total-time` (arrival to response, added by the middleware),
`x-queue-time` (the longest any of the request's inputs waited for its batch),
`x-inference-time` (onnxruntime time of the batches the request's inputs ran in, summed).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Sequence, Union

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import TypeAdapter
from starlette.types import Receive

from core.tasks import TASK_OF_LABEL, TASKS, Task
from service import tracing
from service.http.auth import TENANT
from service.http.cache import CACHE_HEADER, RESOLVED
from service.http.errors import endpoints
from service.inference.dataplane import Ran, admit, run
from service.inference.errors import AnswerTooLarge, InvalidInput, NotReady, ShuttingDown, set_by
from service.metrics import render as render_metrics
from service.inference.registry import ModelEntry, Service
from service.http.schemas import TASK_SCHEMAS, ErrorBody, Health, LiveStatus, ModelInfo, ModelList, TaskInfo

router = APIRouter()

# path -> (endpoint name, body type), for the hot path (service.http.entry)
TASK_BODIES = {task.endpoint: (task.label, TASK_SCHEMAS[task.name].body) for task in TASKS.values()}

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in {
        404: "no model of the endpoint's task is served (see /v1/models)",
        413: "request body too large",
        415: "the body was not sent as JSON (content-type: application/json)",
        422: "invalid input, unknown model or model of another task, too many inputs or evidence, an answer over "
             "ATTSERVE_MAX_ANSWER_BYTES",
        429: "the model's queue is full (see Retry-After)",
        503: "not ready or shutting down",
        504: "the request deadline passed before its inputs ran",
    }.items()
}

ANSWER_JSON: TypeAdapter = TypeAdapter(Any)
IGNORED_FIELDS_HEADER = "X-Attserve-Ignored-Fields"
# the version of the model that produced the answer
MODEL_VERSION_HEADER = "X-Attserve-Model-Version"
MAX_IGNORED_LISTED = 10


def ignored_header(names: list[str]) -> str:
    """The unknown fields a request sent, for X-Attserve-Ignored-Fields: each escaped to
    printable ASCII and cut to 40 characters (a header takes no newline), at most 10 named."""
    shown = [ascii(n)[1:-1][:40] for n in names[:MAX_IGNORED_LISTED]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f", and {more} more" if more else "")


def service_of(request: Request) -> Service:
    return request.app.state.service


async def wait_disconnect(receive: Receive) -> None:
    """Returns when the client goes away (the body was read already, so the next ASGI message
    is http.disconnect)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def answer(service: Service, state: dict[str, Any], receive: Receive, endpoint: str,
                 body: Any) -> tuple[bytes, dict[str, str]]:
    """The JSON answer to a validated body of a task endpoint and its headers. FastAPI's routes
    below (through `predict`) and the hot path (service.http.entry) both answer through here.
    `state`: the request's scope["state"] (its arrival in, the model's name out)."""
    # the load the response cache's raw lookup resolved for these very bytes, if it did, is
    # taken from `state`: a request draws a canary's share once (service.inference.model_control.pick)
    task = TASK_OF_LABEL[endpoint].name
    entry = admit_request(service, state, body.model, task, body.version)
    trace = tracing.current()
    cache, key = service.response_cache, None  # service.http.cache; None when off
    if cache is not None:
        key = cache.key(entry, endpoint, body, state.get(TENANT))
        hit = cache.get(key)
        if hit is not None:
            state["attserve_model"], state["attserve_model_version"] = entry.name, entry.version
            content, headers = hit[0], {**hit[1], CACHE_HEADER: "hit"}
            if trace is not None:
                trace.cache = "hit"
            if ignored := body.ignored_fields():
                headers[IGNORED_FIELDS_HEADER] = ignored_header(ignored)
            return content, headers
    batch = "inputs" in type(body).model_fields  # a class lookup: hasattr on a model raises inside pydantic
    ran = await run_request(service, state, receive, entry, body.inputs if batch else [body], endpoint, batch,
                            explain=body.explain, version=body.version)
    results, headers = ran.results, ran_headers(ran)
    if not body.truncate:
        refuse_truncated(results, batch)
    answer_of = TASK_SCHEMAS[task].answer_of
    ignored = body.ignored_fields()
    if ignored:
        headers[IGNORED_FIELDS_HEADER] = ignored_header(ignored)
    # Rendered here rather than by FastAPI's response_model: the answer is built to the schema
    # above (tests check it against /openapi.json), and re-validating it is paid on every request.
    # pydantic's JSON writer: the same JSON as json.dumps (shortest round-trip floats, UTF-8) at
    # a fraction of its cost
    serialising = time.time_ns() if trace is not None else 0
    document = answer_of(body, results) if answer_of is not None else {"results": results} if batch else results[0]
    # an answer with explanations can take milliseconds to write (up to max_answer_bytes): off
    # the event loop; the others are a few hundred bytes an input
    content = await asyncio.to_thread(ANSWER_JSON.dump_json, document) if body.explain else \
        ANSWER_JSON.dump_json(document)
    limit = service.settings.max_answer_bytes
    if len(content) > limit:
        raise AnswerTooLarge(f"the answer is {len(content)} bytes, over {limit} {set_by('max_answer_bytes')}; "
                             "send fewer inputs per request" + (" or fewer with \"explain\": true" if body.explain else ""))
    if trace is not None:
        trace.serialised(serialising)
    if cache is not None:  # a 200 answer: errors were raised above
        # the hot path's body bytes (service.http.entry): byte-identical repeats are answered before validation
        cache.put(key, content, headers, state.get("attserve_raw_body"), (body.model, getattr(body, "version", None)))
        headers[CACHE_HEADER] = "miss"
        if trace is not None:
            trace.cache = "miss"
    return content, headers


async def predict(request: Request, endpoint: str, body: Any) -> Response:
    """`answer` as FastAPI's task routes return it."""
    content, headers = await answer(service_of(request), request.scope.setdefault("state", {}), request.receive,
                                    endpoint, body)
    return Response(content, media_type="application/json", headers=headers)


def admit_request(service: Service, state: dict[str, Any], model: str | None, task: str,
                  version: str | None = None) -> ModelEntry:
    """dataplane.admit for an HTTP request: the load that serves it, named in `state` (the
    request's scope["state"]) for its metrics."""
    entry = admit(service, model, task, version, resolved=state.pop(RESOLVED, None))
    state["attserve_model"] = entry.name
    return entry


async def run_request(service: Service, state: dict[str, Any], receive: Receive, entry: ModelEntry,
                      inputs: Sequence[Any], endpoint: str, batch: bool, explain: bool = False,
                      version: str | None = None) -> Ran:
    """dataplane.run for an HTTP request: its deadline from its arrival (stamped by
    service.http.http's protocol, else by the entry point), cancelled when its client
    disconnects, the version that answers named in `state` for its metrics."""
    state["attserve_model_version"] = entry.version
    ran = await run(service, entry, inputs, endpoint=endpoint, batch=batch, arrival=state.get("attserve_arrival"),
                    cancel=lambda: wait_disconnect(receive), explain=explain, version=version)
    state["attserve_model_version"] = ran.entry.version
    return ran


def ran_headers(ran: Ran) -> dict[str, str]:
    """The timing headers (ms) and the version that answered."""
    return {"x-queue-time": f"{ran.queue_s * 1000:.3f}", "x-inference-time": f"{ran.inference_s * 1000:.3f}",
            MODEL_VERSION_HEADER: ran.entry.version}


def refuse_truncated(results: list[dict], batch: bool) -> None:
    """InvalidInput for a request that sent `"truncate": false` and has a text longer than the
    model's max length (as TEI answers it): which input, and what to send."""
    cut = [i for i, result in enumerate(results) if result["truncated"]]
    if cut:
        where = (f"inputs[{cut[0]}]" + (f" and {len(cut) - 1} more inputs" if len(cut) > 1 else "") + ": ") if batch else ""
        raise InvalidInput(f"{where}a text is longer than the model's max length (its max_lengths in /v1/models); "
                           "send \"truncate\": true to cut it, or a shorter text")


def add_task_route(task: Task) -> None:
    """`POST task.endpoint`: one input or a batch of the task, answered by `predict`."""
    schemas = TASK_SCHEMAS[task.name]

    async def route(body: Any, request: Request) -> Any:
        return await predict(request, task.label, body)

    # FastAPI reads the body's type from the signature: the task's own request schema
    route.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter("body", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=schemas.body),
        inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request),
    ], return_annotation=Any)
    route.__name__ = route.__qualname__ = task.label  # the OpenAPI operation id: `<label>_<label>_post`
    route.__doc__ = task.summary
    answers = Union[schemas.answer, schemas.batch_answer] if schemas.has_batch_form else schemas.answer
    router.add_api_route(task.endpoint, route, methods=["POST"], response_model=answers, responses=_ERRORS,
                         tags=["inference"])


for _task in TASKS.values():
    add_task_route(_task)


# the routes outside the OpenAPI schema, which gives every other route's description
_UNLISTED_ROUTES = {"GET /ui": "a page to try the models and see their explanations (\"explain\": true)",
                    "GET /openapi.json": "the OpenAPI schema of this API",
                    "GET /docs": "the API's interactive documentation (Swagger UI)", "GET /redoc": "the API's documentation (ReDoc)"}


def _route_summary(app: Any, line: str) -> str:
    """The first paragraph of the route's documentation (its docstring, through the OpenAPI
    schema) for an endpoint "METHOD /path"."""
    methods, path = line.split(" ", 1)
    operation = app.openapi().get("paths", {}).get(path, {}).get(methods.split(",")[0].lower(), {})
    text = operation.get("description") or _UNLISTED_ROUTES.get(line) or operation.get("summary", "")
    return " ".join(text.split("\n\n")[0].split())


@router.get("/", include_in_schema=False)
async def index(request: Request) -> Any:
    """A short index of the service: what it is and where to go. The endpoints are the app's own
    routes, as a 404 lists them (service.http.errors.endpoints), so a new route cannot be left out."""
    app = request.app
    return {
        "name": app.title,
        "version": app.version,
        "description": app.description,
        "endpoints": {line: _route_summary(app, line) for line in endpoints(app) if line != "GET /"},
        "docs": app.docs_url,
        "openapi": app.openapi_url,
    }


@router.get("/health/live", response_model=LiveStatus, tags=["health"])
async def live() -> Any:
    """200 while the process is up (a liveness probe): nothing about the models, see /health/ready."""
    return {"status": "alive"}


@router.get("/health/ready", response_model=Health, responses={503: {"model": ErrorBody}}, tags=["health"])
async def ready(request: Request) -> Any:
    """200 when every model is loaded and warmed up and every task served still has a model, else 503
    (Service.unready_reason says why)."""
    service = service_of(request)
    if service.draining:
        raise ShuttingDown("the server is shutting down")
    statuses = {name: e.status for name, e in sorted(service.models.items())}
    reason = service.unready_reason()
    if reason is not None:
        raise NotReady(reason, headers={"Retry-After": "5"})
    group = request.app.state.worker_group
    if group is not None and (ready := group.ready_count()) < group.expected:
        raise NotReady(f"workers ready: {ready} of {group.expected}", headers={"Retry-After": "5"})
    return {"status": "ready", "models": statuses}


@router.get("/v1/models", response_model=ModelList, tags=["models"])
async def list_models(request: Request) -> Any:
    """The models, their tasks and each task's default."""
    service = service_of(request)
    choices = {task: service.default_choice(task) for task in TASKS}
    tasks = {}
    for task, spec in TASKS.items():
        default, reason = choices[task]
        tasks[task] = TaskInfo(endpoint=spec.endpoint, models=sorted(n for n, e in service.models.items() if e.task == task),
                               default=default, default_reason=reason)
    out = []
    for name, e in sorted(service.models.items()):
        info: dict[str, Any] = {"name": name, "status": e.status, "error": e.public_error,
                                "versions": service.version_index(name)}
        if name in service.canary and service.canary[name][0] in service.versions.get(name, {}):
            info["canary"] = {"version": service.canary[name][0], "share": service.canary[name][1], "rest": e.version}
        if e.config is not None:
            c = e.config
            info.update(task=c.task, architecture=c.architecture, kind=c.kind, version=e.version, description=c.description,
                        labels=c.labels, max_lengths=c.max_lengths, max_evidence=c.max_evidence,
                        metrics=c.metrics, default=choices[c.task][0] == name,
                        default_reason=choices[c.task][1] if choices[c.task][0] == name else None,
                        temperature=c.temperature,
                        explanation=c.explanation.method if c.explanation is not None else None, card=c.card.model_dump() if c.card is not None else None)
        if e.runtime is not None:
            info.update(provider=e.runtime.provider, provider_options=e.runtime.provider_options,
                        intra_op_threads=e.runtime.threads, length_buckets=e.runtime.buckets,
                        batch_grid=e.runtime.batch_sizes, warmup=e.runtime.warmup_report)
        out.append(ModelInfo(**info))
    return {"models": out, "tasks": tasks}


@router.get("/metrics", response_class=PlainTextResponse, tags=["health"])
async def metrics(request: Request) -> Response:
    """Prometheus metrics, in its text format."""
    return Response(render_metrics(service_of(request).metrics), media_type=CONTENT_TYPE_LATEST)
