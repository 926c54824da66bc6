"""HTTP floor: the service's web stack (uvicorn + FastAPI) with nothing behind it.

Each inference path reads and parses the JSON body and answers a constant prediction of the
service's shape, rendered by the chosen JSON library (no pydantic model), so the floor's cost
per request is the web stack plus JSON; the service's extra cost over it is our own layers
(validation, tokenization, batching, inference, pydantic rendering).

    BENCH_FLOOR_JSON=stdlib|orjson  JSON library for parsing the body and rendering the answer
    uvicorn bench.floor_app:create_app --factory
"""

from __future__ import annotations

import json
import os

from fastapi import FastAPI, Request, Response

PATHS = ("/classify", "/entailment", "/verify")
ANSWER = {
    "label": "entailment",
    "scores": {"entailment": 0.7, "neutral": 0.2, "contradiction": 0.1},
    "model": "floor",
    "truncated": False,
}


def create_app() -> FastAPI:
    library = os.environ.get("BENCH_FLOOR_JSON", "stdlib")
    if library == "orjson":
        import orjson

        loads, dumps = orjson.loads, orjson.dumps
    elif library == "stdlib":
        loads, dumps = json.loads, lambda value: json.dumps(value).encode()
    else:
        raise ValueError(f"BENCH_FLOOR_JSON={library!r}; expected stdlib or orjson")

    app = FastAPI(title="attserve HTTP floor")

    async def answer(request: Request) -> Response:
        body = loads(await request.body())
        value = {"results": [ANSWER] * len(body["inputs"])} if "inputs" in body else ANSWER
        return Response(dumps(value), media_type="application/json")

    for path in PATHS:
        app.add_api_route(path, answer, methods=["POST"])

    @app.get("/health/ready")
    async def ready():
        return {"status": "ready"}

    return app
