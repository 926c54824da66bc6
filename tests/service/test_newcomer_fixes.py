"""Issue 61.9 / 65: the root index lists every route, /metrics carries process metrics and no
`_created` series, Triton's model-config endpoint, /tokenize renders large answers off the
event loop, and the hints that name pip name the venv's."""

from __future__ import annotations

import asyncio

import pytest

from service.settings import Settings
from tests.bundles import metric_samples, running_app


def get_all(settings: Settings, paths: list[str]) -> list:
    async def scenario():
        async with running_app(settings) as (_, client):
            return [await client.get(path) for path in paths]
    return asyncio.run(scenario())


def test_the_root_index_lists_every_public_route(service_bundles):
    """Every operation of the OpenAPI schema, /tokenize and the /v2 protocol among them, is in
    the index with its description (the index is derived from the routes, not kept by hand)."""
    spec, index = get_all(Settings(model_repository=service_bundles), ["/openapi.json", "/"])
    listed = index.json()["endpoints"]
    operations = [f"{method.upper()} {path}" for path, ops in spec.json()["paths"].items() for method in ops]
    assert "POST /tokenize" in operations and any(" /v2/" in o for o in operations)
    missing = [o for o in operations if o not in listed]
    assert not missing, missing
    assert "GET /ui" in listed
    assert all(listed[o] for o in operations), {o: listed[o] for o in operations if not listed[o]}
