"""`hsi ingest` registers the batches closed as of now as Dagster partitions (#16 item 1), on a fresh instance."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg

from hsi_dagster.cli.main import main
from hsi_dagster.partitions import BATCH_PARTITIONS_NAME
from tests.support.pipeline_helpers import closed_windows

REPO = Path(__file__).resolve().parents[2]


def test_ingest_registers_closed_batches_once(tmp_path, monkeypatch, capsys):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    db = tmp_path / "hsi.duckdb"
    source = tmp_path / "d.jsonl"
    source.write_text("\n".join(closed_windows(["driveway", "porch"], 1, start=datetime.now(UTC) - timedelta(hours=2))))
    assert main(["ingest", "--db", str(db), str(source)]) == 0
    assert "2 closed batches registered" in capsys.readouterr().out
    assert main(["ingest", "--db", str(db), str(source)]) == 0  # again: nothing new
    assert "registered" not in capsys.readouterr().out
    with dg.DagsterInstance.from_config(str(home)) as instance:
        keys = instance.get_dynamic_partitions(BATCH_PARTITIONS_NAME)
    assert len(keys) == 2 and {k.split("__")[0] for k in keys} == {"driveway", "porch"}
