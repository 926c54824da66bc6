"""Checkpoint -> ONNX bundle (model.onnx + tokenizer.json + config.json), with a parity check."""
