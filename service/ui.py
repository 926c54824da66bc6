"""The explanation page: static files under `service/static/ui/`, served at `/ui/`.

One HTML file, one script, one style sheet; no CDN, no build step. The page calls the task
endpoints with `"explain": true` and `/v1/models` on the same origin (relative URLs, so it also
works behind a path prefix). Every response of the page carries a strict Content-Security-
Policy: only this origin's script and style sheet run (no inline code, no third-party
anything), nothing may frame it, and it submits no form anywhere (the script sends the
requests). `/ui` redirects to `/ui/`, so the page's relative links resolve inside the mount.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

UI_DIR = Path(__file__).resolve().parent / "static" / "ui"
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


class UIFiles(StaticFiles):
    """StaticFiles (html mode: a directory serves its index.html) with the page's security
    headers on every answer, 304s included."""

    async def get_response(self, path: str, scope: Scope) -> Response:
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
