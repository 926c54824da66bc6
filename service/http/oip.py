"""The Open Inference Protocol (KServe v2, the HTTP protocol of Triton, KServe and MLServer)
beside the task API, answered by the same model engines through the same dataplane
(service.inference.dataplane, as routes.admit_request and routes.run_request give it a request).

Tensors of a model (`GET /v2/models/{name}` lists them):

    inputs   the task's text fields, datatype BYTES (UTF-8):
               classification  text [n]
               entailment      premise [n], hypothesis [n]
               verification    claim [n], evidence [n, k]: claim i's evidence is row i, ragged
                               lists padded with empty strings ("" is never valid evidence, so
                               padding cannot be mistaken for a sentence); [n] means one each
               rerank          query [n], texts [n, k], padded the same way
    outputs  label [n] BYTES, scores [n, labels] FP32 (the labels in the model's order, as in
             the metadata's `parameters.labels`), truncated [n] BOOL, and for verification
             evidence_scores [n, k] FP32 (0 for padding); a reranker (no labels): truncated [n]
             and scores [n, k] FP32, each text's log-odds (0 for padding)

Text fields may also be shaped [n, 1]. The binary tensor data extension is supported both
ways (what `tritonclient` sends and asks for by default): an input with
`parameters.binary_data_size` is read from the bytes after the JSON header
(`Inference-Header-Content-Length`), BYTES elements as 4-byte little-endian length + bytes;
outputs are binary when the request sets `parameters.binary_data_output` or an output's
`parameters.binary_data`. Errors are `{"error": "..."}` (service.http.errors) with the task
API's status codes; a readiness answer of false is 400, as the protocol says (4xx = false).

A request is bounded before anything is built from it: the body is parsed by
pydantic's JSON parser (nesting and number size limited), the shapes declared are checked
against the service's limits before an element is read, every parse failure is a 400 that
quotes the input only as a short escaped excerpt, and a content-type other than JSON or
octet-stream (text/plain, the form types: what a web page sends cross-origin without a
preflight) is 415.
"""

from __future__ import annotations

import asyncio
import json
import math
import struct
from types import SimpleNamespace
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.tasks import TASKS
from service.inference.engine import Engine
from service.http.entry import OFFLOAD_BODY_BYTES
from service.inference.errors import BadRequest, InvalidInput, ModelNotFound, UnsupportedMediaType, excerpt
from service.inference.registry import ModelEntry, Service, version_order
from service.http.routes import admit_request, ran_headers, run_request, service_of

router = APIRouter(prefix="/v2", tags=["open inference protocol"])

SERVER_NAME = "attserve"
EXTENSIONS = ["binary_tensor_data"]
HEADER_LENGTH = "inference-header-content-length"


class _Tensor(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    # [n] or [n, k] (int64 dims, as the protocol's): bounded here, before anything reads them
    shape: list[Annotated[int, Field(ge=0, lt=2**63)]] = Field(min_length=1, max_length=2)
    datatype: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    data: Any = None


class _RequestedOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    parameters: dict[str, Any] = Field(default_factory=dict)


class _InferRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    inputs: list[_Tensor] = Field(min_length=1)
    outputs: list[_RequestedOutput] | None = None


# --- documented answers (OpenAPI) ------------------------------------------------------------------

class ErrorV2(BaseModel):
    error: str


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class Liveness(BaseModel):
    live: bool


class Readiness(BaseModel):
    ready: bool


class ModelReadiness(BaseModel):
    name: str
    ready: bool


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]
    parameters: dict[str, Any]


class OutputTensor(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    data: list[Any] | None = None
    parameters: dict[str, Any] | None = None


class InferResponse(BaseModel):
    model_name: str
    model_version: str
    id: str | None = None
    outputs: list[OutputTensor]


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ErrorV2} for status in statuses}


def _inline_schema(model: type[BaseModel]) -> dict:
    """The JSON schema with its $defs inlined (an OpenAPI requestBody declared by hand cannot
    point into pydantic's $defs)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(defs[node["$ref"].rsplit("/", 1)[1]])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


def _entry(request: Request, name: str, version: str | None, ready: bool = True) -> ModelEntry:
    """The model `name` (its newest ready version, or `version`); 404 for an unknown one."""
    service = service_of(request)
    entry = service.models.get(name)
    if entry is None or entry.config is None:
        raise ModelNotFound(f"unknown model {excerpt(name)}")
    if version is not None:
        versions = service.versions.get(name, {})
        if version not in versions:
            raise ModelNotFound(f"model {name!r} has versions {sorted(versions, key=version_order)}, "
                                f"not {excerpt(version)}")
        entry = versions[version]
    if ready:
        # the dataplane's admission: the task API's checks (draining, still loading, failed) and statuses
        return admit_request(service, request.scope.setdefault("state", {}), name, entry.config.task, version)
    return entry


def output_names(task: str) -> list[str]:
    spec = TASKS[task]
    return (["label", "scores"] if spec.labelled else []) + ["truncated"] + ([spec.per_text] if spec.per_text else [])


def _metadata(entry: ModelEntry) -> dict:
    config = entry.config
    task = TASKS[config.task]
    inputs = [{"name": field.name, "datatype": "BYTES", "shape": [-1, -1] if field.many else [-1]}
              for field in task.fields]
    shapes = {"label": ("BYTES", [-1]), "scores": ("FP32", [-1, len(config.labels)]),
              "truncated": ("BOOL", [-1]), task.per_text: ("FP32", [-1, -1])}
    outputs = [{"name": n, "datatype": shapes[n][0], "shape": shapes[n][1]} for n in output_names(config.task)]
    return {"name": entry.name, "versions": [entry.version], "platform": "onnxruntime_onnx",
            "inputs": inputs, "outputs": outputs,
            "parameters": {"task": config.task, "labels": list(config.labels), "architecture": config.architecture}}


# Triton's model-config data_type of each protocol datatype the tensors use
TRITON_DATA_TYPES = {"BYTES": "TYPE_STRING", "FP32": "TYPE_FP32", "BOOL": "TYPE_BOOL"}


def _config_tensor(tensor: dict) -> dict:
    """A metadata tensor in Triton's model-config form: `dims` without the batch dimension (the
    config says max_batch_size > 0); a tensor of one element per example is dims [1] reshaped
    to [], as Triton writes it."""
    dims = tensor["shape"][1:]
    out = {"name": tensor["name"], "data_type": TRITON_DATA_TYPES[tensor["datatype"]], "dims": dims or [1]}
    if not dims:
        out["reshape"] = {"shape": []}
    return out


def _model_config(entry: ModelEntry, service: Service) -> dict:
    """Triton's model configuration (`GET /v2/models/NAME/config`), as far as it maps onto a
    bundle: its tensors (the metadata's), max_batch_size (the inputs one request may carry),
    the dynamic batcher's delay, every version served, and the task, labels and architecture
    as parameters (Triton's string parameters)."""
    metadata = _metadata(entry)
    settings = service.settings
    versions = sorted(service.versions.get(entry.name, {}) or [entry.version], key=version_order)
    parameters = {**metadata["parameters"], "labels": json.dumps(metadata["parameters"]["labels"]),
                  "version": entry.version}
    return {"name": entry.name, "platform": metadata["platform"], "backend": "onnxruntime",
            "version_policy": {"specific": {"versions": versions}},
            "max_batch_size": settings.max_inputs_per_request,
            "input": [_config_tensor(t) for t in metadata["inputs"]],
            "output": [_config_tensor(t) for t in metadata["outputs"]],
            "dynamic_batching": {"max_queue_delay_microseconds": int(settings.max_batch_delay_ms * 1000),
                                 "preferred_batch_size": [settings.max_batch_size]},
            "parameters": {key: {"string_value": str(value)} for key, value in parameters.items()}}


# --- routes -----------------------------------------------------------------------------------

@router.get("", response_model=ServerMetadata)
async def server_metadata(request: Request) -> dict:
    return {"name": SERVER_NAME, "version": request.app.version, "extensions": EXTENSIONS}


@router.get("/health/live", response_model=Liveness)
async def server_live() -> dict:
    return {"live": True}


@router.get("/health/ready", response_model=Readiness, responses={400: {"model": Readiness}})
async def server_ready(request: Request) -> JSONResponse:
    service = service_of(request)
    ready = service.ready  # the same readiness as /health/ready
    group = request.app.state.worker_group
    ready = ready and (group is None or group.ready_count() >= group.expected)
    return JSONResponse({"ready": ready}, status_code=200 if ready else 400)


@router.get("/models/{name}", response_model=ModelMetadata, responses=_errors(404))
@router.get("/models/{name}/versions/{version}", response_model=ModelMetadata, responses=_errors(404))
async def model_metadata(request: Request, name: str, version: str | None = None) -> dict:
    return _metadata(_entry(request, name, version, ready=False))


@router.get("/models/{name}/config", response_model=dict[str, Any], responses=_errors(404))
@router.get("/models/{name}/versions/{version}/config", response_model=dict[str, Any], responses=_errors(404))
async def model_config(request: Request, name: str, version: str | None = None) -> dict:
    """The model's configuration in Triton's model-config JSON (name, platform, max_batch_size,
    input and output with data_type and dims, version_policy, dynamic_batching, parameters)."""
    return _model_config(_entry(request, name, version, ready=False), service_of(request))


@router.get("/models/{name}/ready", response_model=ModelReadiness,
            responses={400: {"model": ModelReadiness}, **_errors(404)})
@router.get("/models/{name}/versions/{version}/ready", response_model=ModelReadiness,
            responses={400: {"model": ModelReadiness}, **_errors(404)})
async def model_ready(request: Request, name: str, version: str | None = None) -> JSONResponse:
    entry = _entry(request, name, version, ready=False)
    ready = entry.status == "ready" and not service_of(request).draining
    return JSONResponse({"name": entry.name, "ready": ready}, status_code=200 if ready else 400)


_INFER_DOC: dict[str, Any] = {
    "response_model": InferResponse,
    "responses": {200: {"content": {"application/octet-stream": {}}}, **_errors(400, 404, 413, 415, 422, 429, 503, 504)},
    # the body is read raw (JSON, or a JSON header + binary tensors): declared here for clients
    "openapi_extra": {"requestBody": {"required": True, "content": {"application/json": {"schema": _inline_schema(_InferRequest)}}}},
}


@router.post("/models/{name}/infer", **_INFER_DOC)
@router.post("/models/{name}/versions/{version}/infer", **_INFER_DOC)
async def infer(request: Request, name: str, version: str | None = None) -> Response:
    entry = _entry(request, name, version)
    _check_media_type(request.headers.get("content-type"))
    raw = await request.body()
    header_length = request.headers.get(HEADER_LENGTH)
    # parsing a large body takes milliseconds: off the event loop
    infer_request, binary = await asyncio.to_thread(_parse, raw, header_length) if len(raw) > OFFLOAD_BODY_BYTES \
        else _parse(raw, header_length)
    task = entry.config.task
    columns, n, k = _columns(infer_request, binary, task, entry.engine)
    inputs = [SimpleNamespace(**{field: columns[field][i] for field in TASKS[task].field_names}) for i in range(n)]
    ran = await run_request(service_of(request), request.scope.setdefault("state", {}), request.receive, entry, inputs,
                            "v2_infer", batch=n > 1, version=version)
    return _respond(ran.entry, infer_request, ran.results, k, ran_headers(ran))


# --- request decoding ---------------------------------------------------------------------------

# JSON, and the binary tensor extension's JSON header + tensors. Not text/plain or the form
# types, which a web page may POST to another origin without a CORS preflight. No content-type
# at all stays accepted: tritonclient sends none.
MEDIA_TYPES = ("application/json", "application/octet-stream")


def _check_media_type(content_type: str | None) -> None:
    if content_type is not None and content_type.split(";")[0].strip().lower() not in MEDIA_TYPES:
        raise UnsupportedMediaType(f"content-type {excerpt(content_type.split(';')[0].strip())}: send "
                                   "application/json (application/octet-stream with the binary tensor extension)")


def _parse(raw: bytes, header_length: str | None) -> tuple[_InferRequest, bytes]:
    if header_length is not None:
        try:
            size = int(header_length)
        except ValueError:
            size = -1
        if not 0 < size <= len(raw):
            raise BadRequest(f"{HEADER_LENGTH} {excerpt(header_length, 20)} is not a length within the body ({len(raw)} bytes)")
        head, binary = raw[:size], raw[size:]
    else:
        head, binary = raw, b""
    # pydantic's own JSON parser: nesting deeper than its recursion limit and numbers past
    # Python's 4,300 digits are parse errors (json.loads raised RecursionError / ValueError: 500s)
    try:
        return _InferRequest.model_validate_json(head), binary
    except ValidationError as exc:
        err = exc.errors(include_input=False, include_url=False)[0]
        if err["type"] == "json_invalid":
            raise BadRequest(f"the inference request is not valid JSON ({err['msg']})") from None
        where = excerpt(".".join(str(p) for p in err.get("loc", ())) or "request")
        raise BadRequest(f"{where}: {err['msg']} ({exc.error_count()} problem(s))") from None


def _flatten(data: Any) -> list:
    if isinstance(data, list):
        out = []
        for item in data:
            out.extend(_flatten(item))
        return out
    return [data]


def _bytes_elements(tensor: _Tensor, binary: bytes, offset: int, count: int) -> tuple[list[str], int]:
    """The tensor's elements as str (binary: at most one past its shape's `count`), and the
    binary offset after it."""
    size = tensor.parameters.get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
            # the value is not quoted: it may be any JSON (an integer of 4,000 digits)
            raise BadRequest(f"input {tensor.name!r}: binary_data_size is not a length within the body's "
                                  f"binary part ({len(binary) - offset} bytes left)")
        chunk, at, values = binary[offset : offset + size], 0, []
        while at < len(chunk) and len(values) <= count:
            if at + 4 > len(chunk):
                raise BadRequest(f"input {tensor.name!r}: truncated BYTES element length")
            (length,) = struct.unpack_from("<I", chunk, at)
            at += 4
            if at + length > len(chunk):
                raise BadRequest(f"input {tensor.name!r}: a BYTES element runs past its data")
            values.append(chunk[at : at + length])
            at += length
        if len(values) > count:
            raise BadRequest(f"input {tensor.name!r}: the binary data holds more than the {count} elements "
                                  f"of shape {tensor.shape}")
        offset += size
    else:
        if tensor.data is None:
            raise BadRequest(f"input {tensor.name!r}: no data and no binary_data_size")
        values = _flatten(tensor.data)
    texts = []
    for value in values:
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest(f"input {tensor.name!r}: an element is not UTF-8 text") from None
        if not isinstance(value, str):
            raise BadRequest(f"input {tensor.name!r}: BYTES elements must be strings, got {type(value).__name__}")
        texts.append(value)
    return texts, offset


def _declared(tensor: _Tensor, listed: str | None) -> tuple[int, int]:
    """A tensor's rows and list width k from its declared shape (k: 1 for a field that is not
    the task's list field `listed`), checked for form before anything is built from them."""
    if tensor.datatype != "BYTES":
        raise BadRequest(f"input {tensor.name!r}: datatype {excerpt(tensor.datatype, 16)}; text inputs are BYTES")
    shape = tensor.shape
    if tensor.name == listed:
        k = shape[1] if len(shape) == 2 else 1
        if k < 1:
            raise BadRequest(f"input {tensor.name!r}: shape {shape}; each input needs at least one "
                                  f"{tensor.name} text (k >= 1)")
        return shape[0], k
    if len(shape) == 2 and shape[1] != 1:
        raise BadRequest(f"input {tensor.name!r}: shape {shape}; use [n] or [n, 1]")
    return shape[0], 1


def _columns(req: _InferRequest, binary: bytes, task: str, engine: Engine) -> tuple[dict[str, list], int, int]:
    """The task's fields, one value per input (a list field such as evidence: a list per
    input), the input count n and the list width k (0 for a task without a list field). The
    declared shapes are checked against the service's limits (engine.check_sizes) before any
    element is read or any row built: a shape is a few bytes, what it declares may be billions
    of rows."""
    fields = TASKS[task].field_names
    listed = TASKS[task].list_field.name if TASKS[task].list_field is not None else None
    names = [t.name for t in req.inputs]
    if sorted(names) != sorted(fields):
        shown = ", ".join(excerpt(name) for name in names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
        raise BadRequest(f"inputs [{shown}]: a {task} model takes exactly {list(fields)} (BYTES)")
    declared = {t.name: _declared(t, listed) for t in req.inputs}
    rows = {name: n for name, (n, _) in declared.items()}
    if len(set(rows.values())) != 1:
        raise BadRequest(f"inputs disagree on the batch size (the first dimension of their shape): {rows}")
    n = rows[fields[0]]
    if n < 1:
        raise BadRequest("the batch is empty")
    k = declared[listed][1] if listed is not None else 0
    engine.check_sizes(n, [(f"input '{listed}' (shape [n, k])", k)] if listed is not None else ())
    columns: dict[str, list] = {}
    offset = 0
    for tensor in req.inputs:  # binary parts follow the inputs' order
        count = math.prod(tensor.shape)
        values, offset = _bytes_elements(tensor, binary, offset, count)
        if len(values) != count:
            raise BadRequest(f"input {tensor.name!r}: shape {tensor.shape} holds {count} elements, "
                                  f"the data {len(values)}")
        if tensor.name == listed:
            # padding ("") only after the texts of a row
            cleaned = []
            for i in range(n):
                row = values[i * k : (i + 1) * k]
                texts = [s for s in row if s != ""]
                if row[: len(texts)] != texts:
                    raise BadRequest(f"input {listed!r} row {i}: empty strings pad the end of a row only")
                if not texts:
                    raise InvalidInput(f"{listed} row {i}: no {listed} text")
                cleaned.append(texts)
            columns[listed] = cleaned
        else:
            columns[tensor.name] = values
    if len(binary) != offset:
        raise BadRequest(f"{len(binary) - offset} bytes after the JSON header belong to no input")
    return columns, n, k


# --- response encoding --------------------------------------------------------------------------

def _serialize_bytes(values: list[str]) -> bytes:
    parts = []
    for value in values:
        data = value.encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def _respond(entry: ModelEntry, req: _InferRequest, results: list[dict], k: int, headers: dict[str, str]) -> Response:
    config = entry.config
    available = output_names(config.task)
    binary_default = bool(req.parameters.get("binary_data_output", False))
    if req.outputs is None:
        wanted = [(name, binary_default) for name in available]
    else:
        wanted = []
        for out in req.outputs:
            if out.name not in available:
                raise BadRequest(f"output {excerpt(out.name)}: model {entry.name!r} has {available}")
            wanted.append((out.name, bool(out.parameters.get("binary_data", binary_default))))
    n = len(results)
    tensors: dict[str, tuple[str, list[int], Any]] = {
        "truncated": ("BOOL", [n], np.asarray([r["truncated"] for r in results], dtype=bool)),
    }
    if TASKS[config.task].labelled:
        tensors["label"] = ("BYTES", [n], [r["label"] for r in results])
        tensors["scores"] = ("FP32", [n, len(config.labels)],
                             np.asarray([[r["scores"][label] for label in config.labels] for r in results], dtype=np.float32))
    per_text = TASKS[config.task].per_text
    if per_text is not None:
        scores = np.zeros((n, k), dtype=np.float32)
        for i, r in enumerate(results):
            scores[i, : len(r[per_text])] = r[per_text]
        tensors[per_text] = ("FP32", [n, k], scores)

    outputs, blobs = [], []
    for name, binary in wanted:
        datatype, shape, value = tensors[name]
        entry_json: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
        if binary:
            blob = _serialize_bytes(value) if datatype == "BYTES" else np.ascontiguousarray(value).tobytes()
            entry_json["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry_json["data"] = value if datatype == "BYTES" else value.reshape(-1).tolist()
        outputs.append(entry_json)
    answer: dict[str, Any] = {"model_name": entry.name, "model_version": entry.version, "outputs": outputs}
    if req.id is not None:
        answer["id"] = req.id
    head = json.dumps(answer, separators=(",", ":")).encode()
    if not blobs:
        return Response(head, media_type="application/json", headers=headers)
    return Response(head + b"".join(blobs), media_type="application/octet-stream",
                    headers={**headers, HEADER_LENGTH: str(len(head))})
