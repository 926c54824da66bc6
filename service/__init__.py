"""The inference service, in layers that import one way (tests/unit/test_import_graph.py):

- shared by every layer, importing none of the sub-packages: settings, metrics, logs,
  tracing (the batcher stamps traces too), worker_group (the workers' shared readiness, read by
  the app and the model control, written by the supervisor);
- service.inference: the models and their execution (runtime, batcher, engine, tasks, registry,
  model_control) and every error the service answers (service.inference.errors); knows nothing
  of HTTP and imports no web framework;
- service.http: HTTP and its protocols (the app, the entry point, the routes, the Open Inference
  Protocol, the explanation page, ...) over the inference layer;
- service.process: processes and operations (`attserve serve`, the server, the workers).

Imports neither torch nor `models`/`training` (a test asserts it)."""
