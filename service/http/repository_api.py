"""The Open Inference Protocol's model repository extension (Triton's and MLServer's), over
service.inference.model_control: mounted unless `ATTSERVE_MODEL_CONTROL_MODE=none`.

    POST /v2/repository/index                   every version on disk or served: name, version,
                                                state (READY, LOADING, UNAVAILABLE), reason
    POST /v2/repository/models/{name}/load      load or reload a model from the repository
    POST /v2/repository/models/{name}/unload    stop serving it
    POST /v2/repository/models/{name}/canary    {"version": "2", "share": 0.1}: that share of
                                                the requests naming no version goes to version 2

load, unload and canary need `explicit` mode (in `poll` mode the folder decides, as Triton
answers). `tritonclient`'s `get_model_repository_index`, `load_model` and `unload_model` work
against it; a load request that carries a config or files (Triton's override) is refused: only a
bundle already in the repository folder is ever loaded. With control keys set
(`ATTSERVE_CONTROL_API_KEYS`), every route here needs one of them (`Authorization: Bearer`),
not a key of the task API. Errors are the protocol's `{"error": "..."}`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from service.errors import InvalidInput, ServiceError
from service.inference.model_control import ModelControl

router = APIRouter(prefix="/v2/repository", tags=["model repository"])


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"


class NotInThisMode(ServiceError):
    status, code = 400, "model_control_mode"


class RepositoryModel(BaseModel):
    name: str
    version: str
    state: str = Field(description="READY, LOADING or UNAVAILABLE")
    reason: str = Field("", description="why it is not ready (\"unloaded\": on disk, not loaded), or why its last "
                        "reload failed while it serves on")


class Canary(BaseModel):
    version: str | None = Field(None, description="the version that takes the share; null: no canary")
    share: float = Field(0.0, ge=0, le=1, description="the share of the requests naming no version")


def _control(request: Request) -> ModelControl:
    control: ModelControl = request.app.state.model_control
    digests = request.app.state.control_key_digests
    if digests:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        matched = False
        if scheme.lower() == "bearer" and token.strip():
            digest = hashlib.sha256(token.strip().encode()).digest()
            for known in digests:  # no early exit: the time does not say which key matched
                matched |= hmac.compare_digest(digest, known)
        if not matched:
            raise Unauthorized("the repository API needs a control key (ATTSERVE_CONTROL_API_KEYS): send "
                               "'Authorization: Bearer <key>'", headers={"WWW-Authenticate": 'Bearer realm="attserve"'})
    return control


def _explicit(control: ModelControl) -> None:
    if control.mode != "explicit":
        raise NotInThisMode(f"models are loaded and unloaded by the repository folder in {control.mode} mode "
                            "(ATTSERVE_MODEL_CONTROL_MODE=explicit for this API)")


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise InvalidInput("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    return body


@router.post("/index", response_model=list[RepositoryModel])
async def repository_index(request: Request) -> Any:
    """Every version of every model in the repository folders or served, with its state."""
    control = _control(request)
    ready_only = bool((await _json_body(request)).get("ready", False))
    rows = control.index()
    return [r for r in rows if r["state"] == "READY"] if ready_only else rows


@router.post("/models/{name}/load")
async def load_model(request: Request, name: str) -> JSONResponse:
    """Load model `name` from the repository, or reload it (each new or changed version is
    loaded and warmed up before it takes traffic; what did not change serves on). Answered
    once every worker serves it."""
    control = _control(request)
    _explicit(control)
    parameters = (await _json_body(request)).get("parameters") or {}
    if set(parameters) - {"unload_dependents"}:
        raise InvalidInput("a load request takes no config or files: only bundles already in the model "
                           "repository folder are loaded")
    await control.load(name)
    return JSONResponse({})


@router.post("/models/{name}/unload")
async def unload_model(request: Request, name: str) -> JSONResponse:
    """Stop serving model `name`; the requests it has queued finish first."""
    control = _control(request)
    _explicit(control)
    await _json_body(request)
    await control.unload(name)
    return JSONResponse({})


@router.post("/models/{name}/canary")
async def set_canary(request: Request, name: str, canary: Canary) -> JSONResponse:
    """Send `share` of the requests naming no version of model `name` to `version`."""
    control = _control(request)
    _explicit(control)
    await control.set_canary(name, canary.version, canary.share)
    return JSONResponse({"name": name, "version": canary.version, "share": canary.share})
