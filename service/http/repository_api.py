"""The Open Inference Protocol's model repository extension (Triton's and MLServer's), over
service.inference.model_control: mounted unless `ATTSERVE_MODEL_CONTROL_MODE=none`.

    POST /v2/repository/index                   every version on disk or served: name, version,
                                                state (READY, LOADING, UNAVAILABLE), reason, traffic
    POST /v2/repository/models/{name}/load      load or reload a model from the repository;
                                                {"parameters": {"canary": {"version": "3", "share": 0}}}:
                                                version 3 takes that share from its first request
    POST /v2/repository/models/{name}/unload    stop serving it; {"version": "1"} (or
                                                {"parameters": {"version": "1"}}): that version only;
                                                "force": true to take a task's default away
    POST /v2/repository/models/{name}/canary    {"version": "2", "share": 0.1}: that share of
                                                the requests naming no version goes to version 2

load, unload and canary need `explicit` mode (in `poll` mode the folder decides, as Triton
answers). `tritonclient`'s `get_model_repository_index`, `load_model` and `unload_model` work
against it; a load request that carries a config or files (Triton's override) is refused: only a
bundle already in the repository folder is ever loaded. With control keys set
(`ATTSERVE_CONTROL_API_KEYS`), every route here needs one of them (`Authorization: Bearer`),
not a key of the task API; the key is checked before the body is read. Errors are the protocol's
`{"error": "..."}` with the service's stable `code` beside it (service.http.errors.error_response); a
body with a field these routes do not take, or of the wrong type, is a 400 that says what to send.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from service.http.errors import json_path
from service.inference.errors import BadRequest, NotInThisMode, Unauthorized
from service.inference.model_control import CanaryShare, ModelControl

router = APIRouter(prefix="/v2/repository", tags=["model repository"])


class RepositoryModel(BaseModel):
    name: str
    version: str
    state: str = Field(description="READY, LOADING or UNAVAILABLE")
    reason: str = Field("", description="why it is not ready (\"unloaded\": on disk, not loaded), or why its last "
                        "reload failed while it serves on")
    traffic: float = Field(0.0, description="the share of the requests naming no version it answers (a canary's "
                           "share, the default the rest)")


# --- the bodies (every field strict: "0.5" is no share, 1 no boolean) ----------------------------

class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IndexBody(_Body):
    ready: StrictBool = False


class LoadParameters(_Body):
    unload_dependents: StrictBool = False  # tritonclient sends it; no model here depends on another
    canary: CanaryShare | None = None


class LoadBody(_Body):
    parameters: LoadParameters = LoadParameters()


class UnloadParameters(_Body):
    unload_dependents: StrictBool = False
    version: StrictStr | None = None
    force: StrictBool = False


class UnloadBody(_Body):
    version: StrictStr | None = None
    force: StrictBool = False
    parameters: UnloadParameters = UnloadParameters()


BODY_HINTS = {
    IndexBody: '{"ready": true} or nothing',
    LoadBody: 'nothing, or {"parameters": {"canary": {"version": "3", "share": 0.1}}} to load version 3 as a '
              "canary taking that share (0: none) from its first request (a load takes no config or files: only "
              "bundles already in the model repository folder are loaded)",
    UnloadBody: 'nothing (every version), {"version": "1"} or {"parameters": {"version": "1"}} (that version only), '
                'and "force": true to unload the last ready version of a task\'s default model',
    CanaryShare: '{"version": "2", "share": 0.1} (share: a number from 0 to 1; 0 keeps version 2 staged with no '
                 'traffic), or {"version": null} to end the canary',
}
Body = TypeVar("Body", bound=BaseModel)


async def _body(request: Request, model: type[Body]) -> Body:
    """The request's JSON body as `model` (an empty body: its defaults); BadRequest,
    naming the field and what to send, for anything else."""
    raw = await request.body()
    try:
        return model.model_validate_json(raw if raw.strip() else b"{}")
    except ValidationError as exc:
        err = exc.errors(include_input=False, include_url=False)[0]
        where = json_path(tuple(err.get("loc", ()))) or "body"
        problem = "not valid JSON" if err["type"] == "json_invalid" else \
            "unknown field" if err["type"] == "extra_forbidden" else err["msg"].replace("Input should be", "expected")
        raise BadRequest(f"{where}: {problem}; send {BODY_HINTS[model]}") from None


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


@router.post("/index", response_model=list[RepositoryModel])
async def repository_index(request: Request) -> Any:
    """Every version of every model in the repository folders or served, with its state."""
    control = _control(request)
    ready_only = (await _body(request, IndexBody)).ready
    rows = control.index()
    return [r for r in rows if r["state"] == "READY"] if ready_only else rows


@router.post("/models/{name}/load")
async def load_model(request: Request, name: str) -> JSONResponse:
    """Load model `name` from the repository, or reload it (each new or changed version is
    loaded and warmed up before it takes traffic; what did not change serves on). Answered
    once every worker serves it."""
    control = _control(request)
    _explicit(control)
    body = await _body(request, LoadBody)
    await control.load(name, body.parameters.canary)
    return JSONResponse({})


@router.post("/models/{name}/unload")
async def unload_model(request: Request, name: str) -> JSONResponse:
    """Stop serving model `name`, or one version of it; the requests it has queued finish first."""
    control = _control(request)
    _explicit(control)
    body = await _body(request, UnloadBody)
    versions = {v for v in (body.version, body.parameters.version) if v is not None}
    if len(versions) > 1:
        raise BadRequest(f"version {body.version!r} and parameters.version {body.parameters.version!r} "
                                "disagree; send one of them")
    await control.unload(name, versions.pop() if versions else None, force=body.force or body.parameters.force)
    return JSONResponse({})


@router.post("/models/{name}/canary")
async def set_canary(request: Request, name: str) -> JSONResponse:
    """Send `share` of the requests naming no version of model `name` to `version`."""
    control = _control(request)
    _explicit(control)
    canary = await _body(request, CanaryShare)
    await control.set_canary(name, canary.version, canary.share)
    return JSONResponse({"name": name, "version": canary.version, "share": canary.share})
