"""The workers' shared readiness (`ATTSERVE_WORKERS=N`, service.process.workers): the app of each
worker reads it for `/health/ready`, the supervisor's workers write it."""

from __future__ import annotations

import os
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
WORKER_COUNT_ENV = "ATTSERVE_WORKER_COUNT"  # set by the supervisor for its workers only


class WorkerGroup:
    """The workers' shared readiness: one marker file per ready worker."""

    def __init__(self, shared_dir: Path, expected: int) -> None:
        self.dir = Path(shared_dir) / "workers"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.expected = expected

    @classmethod
    def from_environment(cls) -> "WorkerGroup | None":
        count, shared = os.environ.get(WORKER_COUNT_ENV), os.environ.get(MULTIPROC_ENV)
        if not count or not shared:
            return None
        return cls(Path(shared), int(count))

    def mark(self, pid: int, ready: bool) -> None:
        marker = self.dir / str(pid)
        if ready:
            marker.touch()
        else:
            marker.unlink(missing_ok=True)

    def ready_count(self) -> int:
        return sum(1 for _ in self.dir.iterdir())
