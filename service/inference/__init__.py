"""The models and their execution: the onnxruntime runtime, the batcher, the engine, the task
adapters, the model registry and the model control. Knows nothing of HTTP (service.http) or of
processes (service.process)."""
