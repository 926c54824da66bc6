"""bench/request_path.py: a function's self time lands in the layer of the file it lives in."""

from bench.request_path import layer_of


def test_layers_follow_the_file() -> None:
    assert layer_of("/v/site-packages/uvicorn/protocols/http/httptools_impl.py", "data_received").startswith("HTTP parse")
    assert layer_of("/work/main/service/http/http.py", "__call__").startswith("our middleware")
    assert layer_of("/v/site-packages/starlette/routing.py", "matches").startswith("routing")
    assert layer_of("/v/site-packages/fastapi/dependencies/utils.py", "solve_dependencies").startswith("FastAPI")
    assert layer_of("/v/site-packages/pydantic/type_adapter.py", "validate_python").startswith("validation")
    assert layer_of("/work/main/service/inference/engine.py", "submit").startswith("engine")
    assert layer_of("/v/site-packages/prometheus_client/metrics.py", "inc").startswith("metrics")
    assert layer_of("/usr/lib/python3.11/logging/__init__.py", "debug").startswith("other")
