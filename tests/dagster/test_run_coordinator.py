"""FrequentQueuedRunCoordinator (dagster.yaml): Dagster's run queue with a fractional dequeue interval. Runs through
the real daemon's queue with it: tests/dagster/test_run_launcher.py and test_live_stream.py (the project's
dagster.yaml)."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.instance import InstanceRef
from dagster._daemon.controller import create_daemon_of_type
from dagster._daemon.run_coordinator import QueuedRunCoordinatorDaemon

from hsi_dagster.instance.coordinator import FrequentQueuedRunCoordinator

REPO = Path(__file__).resolve().parents[2]


def _instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))


def test_the_projects_queue_is_checked_every_half_second_with_its_limits_intact(tmp_path: Path) -> None:
    shutil.copy(REPO / "dagster.yaml", tmp_path / "dagster.yaml")
    with _instance(tmp_path) as instance:
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, FrequentQueuedRunCoordinator)
        assert coordinator.dequeue_interval_seconds == 0.5
        assert coordinator.dequeue_use_threads
        daemon = create_daemon_of_type(QueuedRunCoordinatorDaemon.daemon_type(), instance)
        assert isinstance(daemon, QueuedRunCoordinatorDaemon)
        assert daemon.interval_seconds == 0.5  # what the daemon's loop waits on
        config = instance.get_concurrency_config()
        assert config.run_queue_config is not None and config.run_queue_config.max_concurrent_runs == 8
        assert config.pool_config.default_pool_limit == 1


def test_an_interval_below_the_daemons_wait_step_is_refused(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    config["run_coordinator"]["config"]["dequeue_interval_seconds"] = 0.1
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match=r"dequeue_interval_seconds is 0\.1: it must be at least 0\.5"):
        _instance(tmp_path).run_coordinator  # noqa: B018 - the coordinator is built on first use


def test_without_an_interval_the_queue_is_checked_every_second() -> None:
    assert FrequentQueuedRunCoordinator().dequeue_interval_seconds == 1.0
