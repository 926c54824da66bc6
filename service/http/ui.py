"""The explanation page: static files under `service/static/ui/`, served at `/ui/`.

One HTML file, one script, one style sheet; no CDN, no build step. The page reads the task
registry from `/ui/tasks.json` (made here from core.tasks: each task's endpoint, text fields,
whether it is labelled, its example; and zero-shot's), builds each task's form from its fields,
and calls the task endpoints with `"explain": true` and `/v1/models` on the same origin
(relative URLs, so it also works behind a path prefix): a new task of the registry appears on
the page with nothing here or in the page changed. Every response of the page carries a strict Content-Security-
Policy: only this origin's script and style sheet run (no inline code, no third-party
anything), nothing may frame it, and it submits no form anywhere (the script sends the
requests). `/ui` redirects to `/ui/`, so the page's relative links resolve inside the mount.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from core.tasks import TASKS, Task
from service.http import zero_shot

UI_DIR = Path(__file__).resolve().parents[1] / "static" / "ui"  # service/static/ui
UI_PATH = "/ui"

CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
    "form-action 'none'",
])
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # small files that change with the package: revalidate (ETag / Last-Modified) every time
    "Cache-Control": "no-cache",
}


# the registry as the page reads it, beside its files (no file of the folder: made from core.tasks)
TASKS_FILE = "tasks.json"


def ui_task(task: Task) -> dict[str, Any]:
    """One task as the page builds its form and reads its answer."""
    return {"name": task.name, "endpoint": task.endpoint, "label": task.label, "summary": task.summary,
            "form": task.form.value, "labelled": task.labelled, "per_text": task.per_text,
            "fields": [{"name": f.name, "many": f.many, "description": f.description} for f in task.fields],
            "example": task.example}


def ui_tasks() -> dict[str, Any]:
    """`/ui/tasks.json`: every task of the registry, in its order, and zero-shot (no task: a
    composition over the models of the task it names)."""
    return {"tasks": [ui_task(task) for task in TASKS.values()],
            "zero_shot": {"endpoint": zero_shot.ENDPOINT, "models_of": zero_shot.TASK,
                          "max_candidate_labels": zero_shot.MAX_CANDIDATE_LABELS,
                          "default_template": zero_shot.DEFAULT_TEMPLATE, "example": zero_shot.EXAMPLE}}


class UIFiles(StaticFiles):
    """StaticFiles (html mode: a directory serves its index.html) with the page's security
    headers on every answer, 304s included; `tasks.json` is made from the task registry."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        if path == TASKS_FILE:
            if scope["method"] not in ("GET", "HEAD"):
                raise HTTPException(status_code=405, headers={"Allow": "GET, HEAD"})
            response: Response = JSONResponse(ui_tasks())
        else:
            response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


def mount_ui(app: FastAPI) -> None:
    """Serve the page at `/ui/` (and redirect `/ui` there). Missing files are 404 with the
    service's JSON error body, like any other unknown path."""

    @app.api_route(UI_PATH, methods=["GET", "HEAD"], include_in_schema=False)
    async def ui_redirect() -> RedirectResponse:
        # relative: stays right behind a proxy that adds a path prefix
        return RedirectResponse("ui/", status_code=307, headers=SECURITY_HEADERS)

    app.mount(UI_PATH, UIFiles(directory=UI_DIR, html=True, check_dir=True), name="ui")
