import sys
from pathlib import Path

# tests import their own helpers (model_cases) by module name
sys.path.insert(0, str(Path(__file__).parent))
