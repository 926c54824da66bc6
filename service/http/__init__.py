"""HTTP and its protocols: the app, the entry point and the hot path, the task routes, the Open
Inference Protocol and the model repository API, /tokenize, /zero-shot, the explanation page,
authentication, the response cache and the HTTP protocol's guards. Over service.inference;
imports nothing from service.process."""
