"""The README's own-data section writes bundles to my-models/; git ignores it."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_my_models_is_ignored():
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", "my-models/support-tickets/model.onnx"],
                          cwd=ROOT, capture_output=True)
    assert done.returncode == 0, "my-models/ is not in .gitignore"
