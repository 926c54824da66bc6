"""Benchmarks of the service against the engine, an HTTP floor, a naive server and a peer (`attserve bench`)."""
