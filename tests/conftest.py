# The tests import their shared helpers (bundles, model_cases, paper_benchmarks, mutation_check)
# and each other as `tests.<module>` / `tests.<kind>.<module>`: pyproject.toml's pytest
# `pythonpath = ["."]` puts the repository root on sys.path, and this file applies to every
# sub-folder (unit/, service/, process/, deploy/).
from tests.bundles import service_bundles, shipped_models_server, versioned  # noqa: F401  fixtures shared by every module
