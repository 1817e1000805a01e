"""#16 item 5: a backfill re-assesses a chosen set of batches (one camera) with another configuration; each batch
keeps exactly one row, now written with the new configuration. Real parts: a real instance (SQLite in tmp_path),
the code location loaded by a gRPC code server as the daemon loads it, runs launched as run processes by the default
run launcher, the embedded llama.cpp server.

The backfill is created with the GraphQL mutation the UI's partition dialog sends (`launchPartitionBackfill` with
its "Add config" run config), and advanced by the backfill daemon's own iteration (`execute_backfill_iteration`),
called here in a loop instead of every 30 s by `dagster-daemon`: that loop and the mutation are Dagster internals
(`dagster._daemon`, `dagster_graphql`), used the way Dagster's own backfill tests use them. The instance uses the
default run coordinator (runs launch at once) so that no queue daemon is needed.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

import dagster as dg
import duckdb
import pytest
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.storage.dagster_run import RunsFilter
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import ModuleTarget
from dagster._daemon.backfill import execute_backfill_iteration
from dagster_graphql.client.query import LAUNCH_PARTITION_BACKFILL_MUTATION
from dagster_graphql.test.utils import execute_dagster_graphql

from hsi_dagster.cli.main import main
from hsi_dagster.partitions import BATCH_PARTITIONS_NAME
from tests.support.pipeline_helpers import closed_windows

PIPELINE = ["detection_batches", "enriched_contexts", "budgeted_prompts", "risk_assessments"]
INSTANCE_YAML = """\
run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
telemetry:
  enabled: false
compute_logs:
  module: dagster.core.storage.noop_compute_log_manager
  class: NoOpComputeLogManager
"""


def reassess_config(max_output_tokens: int) -> dict:
    """The run config a user adds in the backfill dialog: the same value for both assets (see the README)."""
    op_config = {"config": {"max_output_tokens": max_output_tokens}}
    return {"ops": {"budgeted_prompts": op_config, "risk_assessments": op_config}}


def run_backfill(ws: WorkspaceProcessContext, partition_keys: list[str], run_config: dict | None) -> str:
    """Launch an asset backfill as the UI does and drive it to completion; its id."""
    params: dict = {
        "assetSelection": [{"path": [name]} for name in PIPELINE],
        "partitionNames": partition_keys,
        "fromFailure": False,
        "tags": [],
    }
    if run_config is not None:
        params["runConfigData"] = run_config
    launched = execute_dagster_graphql(
        ws.create_request_context(), LAUNCH_PARTITION_BACKFILL_MUTATION, {"backfillParams": params}
    )
    reply = launched.data["launchPartitionBackfill"]
    assert reply["__typename"] == "LaunchBackfillSuccess", reply
    backfill_id = reply["backfillId"]
    instance = ws.instance
    deadline = time.monotonic() + 240
    while True:
        list(execute_backfill_iteration(ws, logging.getLogger("backfill")))
        backfill = instance.get_backfill(backfill_id)
        assert backfill is not None
        if backfill.status != BulkActionStatus.REQUESTED:
            break
        assert time.monotonic() < deadline, f"backfill {backfill_id} still {backfill.status}"
        time.sleep(1)
    runs = instance.get_runs(filters=RunsFilter(tags={"dagster/backfill": backfill_id}))
    assert backfill.status == BulkActionStatus.COMPLETED_SUCCESS, [(r.run_id, r.status) for r in runs]
    return backfill_id


def stored(db) -> dict[str, tuple]:
    with duckdb.connect(str(db), read_only=True) as conn:
        rows = conn.execute(
            "SELECT batch_id, context_budget, assessed_at, status FROM risk_assessments ORDER BY batch_id"
        ).fetchall()
    assert len(rows) == len({row[0] for row in rows})  # the table's key: one row per batch, whatever ran
    return {row[0]: row[1:] for row in rows}


@pytest.mark.slow
def test_backfill_reassesses_one_camera_with_another_output_budget(tmp_path, monkeypatch, llama_server):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    db = tmp_path / "hsi.duckdb"
    for name, value in {
        "DAGSTER_HOME": str(home),
        "HSI_DUCKDB_PATH": str(db),
        "HSI_ENV_FILE": "/dev/null",
        "HSI_INBOX_DIR": str(tmp_path / "inbox"),
        "LLAMA_SERVER_URL": llama_server.url,
        "CTX_SIZE": str(llama_server.settings.CTX_SIZE),
        "PARALLEL": str(llama_server.settings.PARALLEL),
        "NEMOTRON_MAX_OUTPUT_TOKENS": "256",
        "PROMPT_SAFETY_MARGIN_TOKENS": "256",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # the code server's working directory: no `.env` there
    source = tmp_path / "d.jsonl"
    start = datetime.now(UTC) - timedelta(hours=3)
    source.write_text("\n".join(closed_windows(["driveway", "porch"], 2, start=start)) + "\n")
    assert main(["ingest", str(source)]) == 0

    with (
        dg.DagsterInstance.get() as instance,
        create_test_daemon_workspace_context(
            ModuleTarget("hsi_dagster.definitions", None, str(tmp_path), None), instance
        ) as ws,
    ):
        keys = instance.get_dynamic_partitions(BATCH_PARTITIONS_NAME)
        assert len(keys) == 4
        driveway = sorted(key for key in keys if key.startswith("driveway__"))  # "a camera": its key prefix
        assert len(driveway) == 2

        run_backfill(ws, driveway, None)  # the settings: 256 output tokens
        first = stored(db)
        assert set(first) == set(driveway)

        again = run_backfill(ws, driveway, reassess_config(128))
        second = stored(db)
        assert set(second) == set(driveway)  # replaced, not added; porch untouched
        for key in driveway:
            budget_before, assessed_before, _ = first[key]
            budget_after, assessed_after, _ = second[key]
            assert budget_after - budget_before == 256 - 128  # the prompt got the output room given back
            assert assessed_after > assessed_before

        runs = instance.get_runs(filters=RunsFilter(tags={"dagster/backfill": again}))
        assert sorted(run.tags["dagster/partition"] for run in runs) == driveway
        assert all(run.run_config == reassess_config(128) for run in runs)
        for key in driveway:  # the materialization says which configuration wrote the row
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey("risk_assessments"), asset_partitions=[key]), limit=1
            ).records
            metadata = records[0].asset_materialization.metadata
            assert metadata["max_output_tokens"].value == 128
