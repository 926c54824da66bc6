"""Every `curl` line of the README's API section that has no body (`-d`) answers as its comment
says, against the bundled models served in process (every command in the README is
run by a test; the lines with a body are checked, answer by answer, in test_shipped_models.py,
the own-data commands in test_own_data_example.py and test_readme_newcomer.py, the tritonclient
snippet in test_open_inference_protocol.py)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from service.settings import Settings
from tests.bundles import running_app

ROOT = Path(__file__).resolve().parents[2]

README = ROOT / "README.md"


def get_lines() -> list[tuple[str, str]]:
    """(path, comment) of each `curl -s localhost:8000/PATH   # comment` line without a body."""
    readme = README.read_text(encoding="utf-8")
    api = readme[readme.index("## API"):]
    api = api[:api.index("\n## ", 3)]
    return [(m.group(1), m.group(2).strip()) for m in re.finditer(r"^curl -s localhost:8000(/\S*)\s+#\s*(.*)$", api, re.M)]


def test_the_readme_get_lines_answer():
    lines = get_lines()
    assert {path for path, _ in lines} >= {"/v1/models", "/health/live", "/health/ready", "/metrics", "/"}

    async def run() -> dict[str, tuple[int, str, str]]:
        async with running_app(Settings(model_repository=ROOT / "model_repository")) as (_, client):
            out = {}
            for path, _ in lines:
                r = await client.get(path)
                out[path] = (r.status_code, r.headers["content-type"], r.text)
            return out

    answers = asyncio.run(run())
    for path, comment in lines:
        status, content_type, text = answers[path]
        assert status == 200, (path, status, text[:200])
        if path == "/metrics":
            assert content_type.startswith("text/plain") and "attserve_requests_total" in text
        else:
            assert content_type == "application/json", (path, content_type)
    models = json.loads(answers["/v1/models"][2])
    # the comment lists what /v1/models gives per model
    first = models["models"][0]
    for key in ("name", "task", "architecture", "kind", "labels", "version", "provider", "max_lengths", "metrics"):
        assert key in first, key
    index = json.loads(answers["/"][2])
    assert {"name", "version", "endpoints", "docs"} <= set(index)
