"""The explanation page reads the task registry from the service (/ui/tasks.json, made by
service.http.ui from core.tasks) and builds each task's form from its fields: the JSON is the
registry, and the page's files spell no task (a new task module appears on the page as it is)."""

from __future__ import annotations

import asyncio
import re

from core.tasks import TASKS
from service.http import zero_shot
from service.settings import Settings
from service.http.ui import SECURITY_HEADERS, UI_DIR
from tests.bundles import running_app


def test_the_pages_task_json_is_the_registry(service_bundles):
    async def scenario():
        async with running_app(Settings(model_repository=service_bundles)) as (app, client):
            return await client.get("/ui/tasks.json"), await client.post("/ui/tasks.json", json={})
    got, post = asyncio.run(scenario())
    assert got.status_code == 200 and got.headers["content-type"].startswith("application/json")
    for name, value in SECURITY_HEADERS.items():
        assert got.headers[name] == value, name
    assert post.status_code == 405
    listed = got.json()
    assert [t["name"] for t in listed["tasks"]] == list(TASKS)
    for entry, task in zip(listed["tasks"], TASKS.values()):
        assert entry == {"name": task.name, "endpoint": task.endpoint, "label": task.label, "summary": task.summary,
                         "form": task.form.value, "labelled": task.labelled, "per_text": task.per_text,
                         "fields": [{"name": f.name, "many": f.many, "description": f.description}
                                    for f in task.fields],
                         "example": task.example}
        assert set(entry["example"]) == set(task.field_names)
    assert listed["zero_shot"] == {"endpoint": zero_shot.ENDPOINT, "models_of": zero_shot.TASK,
                                   "max_candidate_labels": zero_shot.MAX_CANDIDATE_LABELS,
                                   "default_template": zero_shot.DEFAULT_TEMPLATE, "example": zero_shot.EXAMPLE}
    assert zero_shot.TASK in TASKS


def test_the_page_spells_no_task():
    """No task name or endpoint of the registry is written in the page's files: they come from
    tasks.json (the CSS keys on the answer's view, not on a task)."""
    for path in UI_DIR.iterdir():
        text = path.read_text()
        for task in TASKS.values():
            for word in (task.name, task.label):
                found = re.findall(rf"[\"'=]{re.escape(word)}[\"']", text)
                assert not found, (path.name, word, found)
            assert not re.search(rf"\.\.{re.escape(task.endpoint)}\b|[\"']{re.escape(task.endpoint)}[\"']", text), \
                (path.name, task.endpoint)
