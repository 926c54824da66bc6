import sys
from pathlib import Path

# tests import their own helpers (model_cases, bundles) by module name
sys.path.insert(0, str(Path(__file__).parent))

from bundles import service_bundles  # noqa: E402,F401  session fixture shared by every module
