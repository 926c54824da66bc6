"""HTTP floor: the service's web stack (uvicorn + FastAPI) with nothing behind it.

Each inference path reads and parses the JSON body and answers a constant prediction of the
service's shape, so the floor's cost per request is the web stack plus JSON; the service's
extra cost over it is our own layers (validation, tokenization, batching, inference).

    BENCH_FLOOR_JSON=stdlib|orjson  JSON library for parsing the body and rendering the answer
    uvicorn bench.floor_app:create_app --factory
"""

from __future__ import annotations

import json
import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, ORJSONResponse

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

        loads, response_class = orjson.loads, ORJSONResponse
    elif library == "stdlib":
        loads, response_class = json.loads, JSONResponse
    else:
        raise ValueError(f"BENCH_FLOOR_JSON={library!r}; expected stdlib or orjson")

    app = FastAPI(title="attserve HTTP floor", default_response_class=response_class)

    async def answer(request: Request):
        body = loads(await request.body())
        if "inputs" in body:
            return {"results": [ANSWER] * len(body["inputs"])}
        return ANSWER

    for path in PATHS:
        app.add_api_route(path, answer, methods=["POST"])

    @app.get("/health/ready")
    async def ready():
        return {"status": "ready"}

    return app
