"""`attserve score --ray` (scoring.on_ray): the ray.data pipeline must write the rows the
local path writes, on 10,000 rows. In the slow set: Ray is an optional extra (~300 MB installed)
and a local cluster takes ~10-20 s to start on 2 cores (docs/scoring.md)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]'")

from scoring.files import score_file  # noqa: E402
from scoring.on_ray import score_with_ray  # noqa: E402
from tests.service.test_scoring import pair_rows, read_output, write_input  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_cluster():
    # two CPUs for the actors and one for the read and write tasks, as `--ray local` starts it
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_ray_writes_what_the_local_path_writes(service_bundles, tmp_path, local_cluster, suffix):
    rows = pair_rows(10_000)
    rows[1234]["premise"] = "  "  # dropped by both
    source = tmp_path / f"in{suffix}"
    write_input(source, rows)
    local = tmp_path / f"local{suffix}"
    score_file(source, local, service_bundles / "nli", prefix="pred_", progress_bar=False)
    folder = tmp_path / "ray-out"
    result = score_with_ray(source, folder, service_bundles / "nli", address="local", actors=2, prefix="pred_")
    assert result["rows"] == 9_999
    written = [r for part in sorted(folder.iterdir()) for r in read_output(part)]
    expected = read_output(local)
    assert [r["id"] for r in written] == [r["id"] for r in expected]  # order kept
    assert written == expected
