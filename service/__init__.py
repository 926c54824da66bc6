"""The inference service: settings, schemas, runtime (onnxruntime), batcher, engine, routes, metrics.

Imports neither torch nor `models`/`training` (a test asserts it)."""
