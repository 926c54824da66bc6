"""Processes and operations: `attserve serve` (commands), the uvicorn server and its drain, the
supervisor and its workers. The top layer: imports service.http and service.inference."""
