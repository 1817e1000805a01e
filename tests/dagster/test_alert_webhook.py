"""AlertWebhookResource on a real DuckDB file: rows for high/critical assessments, webhook posts to a real local
HTTP server, per-camera cooldown, failures recorded (never raised), idempotency, the fast-path alert without LLM
text, and the alert sensor."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dagster as dg
import pytest

from hsi_dagster.assets.batches import detection_batches
from hsi_dagster.core.verdict.alerts import Alert, redacted_url
from hsi_dagster.resources import AlertWebhookResource, HsiDuckDBResource
from hsi_dagster.sensors import high_risk_alert_sensor, unassessed_fast_path_sensor
from hsi_dagster.storage.alerts import risk_alert_for, unassessed_fast_path_alert
from hsi_dagster.storage.db import connect
from tests.support.pipeline_helpers import resources, run_failure_context, sensor_tick

NOW = datetime(2026, 12, 1, 2, 30, tzinfo=UTC)
COOLDOWN = 600.0


class Webhook:
    """A real HTTP server on 127.0.0.1 recording POSTs; `mode` is 'ok', 'error' (HTTP 500) or 'hang'."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.mode = "ok"
        self.release = threading.Event()
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                webhook.posts.append(
                    {"path": self.path, "content_type": self.headers.get("Content-Type"), "json": json.loads(body)}
                )
                if webhook.mode == "hang":
                    webhook.release.wait(10)
                    return
                self.send_response(500 if webhook.mode == "error" else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Webhook:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    with Webhook() as server:
        yield server


def _hook(url: str | None, *, cooldown: float = COOLDOWN, timeout: float = 5.0) -> AlertWebhookResource:
    return AlertWebhookResource(url=url, cooldown_seconds=cooldown, timeout_seconds=timeout)


@pytest.fixture
def conn(tmp_path: Path):
    with connect(tmp_path / "hsi.duckdb") as connection:
        yield connection


def _add_batch(conn, batch_id: str, camera_id: str, close_reason: str = "window", labels=("car",)) -> None:
    conn.execute(
        "INSERT INTO detection_batches (batch_id, camera_id, started_at, last_ts, closes_at, close_reason,"
        " detection_count, detection_ids, labels, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            batch_id,
            camera_id,
            NOW,
            NOW,
            NOW,
            close_reason,
            len(labels),
            [f"{batch_id}-{i}" for i in range(len(labels))],
            list(labels),
            NOW,
        ],
    )


def _add_assessment(
    conn,
    batch_id: str,
    camera_id: str,
    level: str | None,
    score: int | None,
    status: str = "ok",
    summary: str | None = None,
) -> None:
    conn.execute(
        "INSERT INTO risk_assessments (batch_id, camera_id, risk_score, risk_level, summary, status, assessed_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [batch_id, camera_id, score, level, summary or f"{level} at {camera_id}", status, NOW],
    )


def _alert_rows(conn) -> list[tuple]:
    return conn.execute(
        "SELECT alert_id, batch_id, camera_id, kind, risk_level, risk_score, summary, webhook_status FROM alerts"
        " ORDER BY created_at, alert_id"
    ).fetchall()


def _risk_alert(conn, batch_id: str, camera_id: str, level: str = "high", score: int = 75) -> Alert:
    _add_assessment(conn, batch_id, camera_id, level, score)
    alert = risk_alert_for(conn, batch_id)
    assert alert is not None
    return alert


# ------------------------------------------------------------------------------------------------ levels
def test_high_and_critical_alert_and_post_the_payload(conn, webhook: Webhook) -> None:
    _add_assessment(conn, "b_low", "garage", "low", 10)
    _add_assessment(conn, "b_medium", "garage", "medium", 40)
    _add_assessment(conn, "b_high", "front_door", "high", 72, summary="person tries the door handle")
    _add_assessment(conn, "b_critical", "backyard", "critical", 95, summary="person with crowbar at window")
    _add_assessment(conn, "b_failed", "side_gate", "high", 80, status="invalid_output")  # no ok assessment

    statuses = {}
    for batch_id in ("b_low", "b_medium", "b_high", "b_critical", "b_failed"):
        alert = risk_alert_for(conn, batch_id)
        if alert is not None:
            statuses[batch_id] = _hook(webhook.url).raise_alert(conn, alert, now=NOW)

    assert statuses == {"b_high": "sent", "b_critical": "sent"}
    assert _alert_rows(conn) == [
        ("b_critical:risk", "b_critical", "backyard", "risk", "critical", 95, "person with crowbar at window", "sent"),
        ("b_high:risk", "b_high", "front_door", "risk", "high", 72, "person tries the door handle", "sent"),
    ]
    assert [post["path"] for post in webhook.posts] == ["/hook", "/hook"]
    assert all(post["content_type"] == "application/json" for post in webhook.posts)
    assert [post["json"] for post in webhook.posts] == [
        {
            "alert_id": "b_high:risk",
            "kind": "risk",
            "batch_id": "b_high",
            "camera_id": "front_door",
            "risk_level": "high",
            "risk_score": 72,
            "summary": "person tries the door handle",
        },
        {
            "alert_id": "b_critical:risk",
            "kind": "risk",
            "batch_id": "b_critical",
            "camera_id": "backyard",
            "risk_level": "critical",
            "risk_score": 95,
            "summary": "person with crowbar at window",
        },
    ]


def test_low_and_medium_produce_no_alert(conn, webhook: Webhook) -> None:
    _add_assessment(conn, "b_low", "garage", "low", 5)
    _add_assessment(conn, "b_medium", "garage", "medium", 45)
    assert risk_alert_for(conn, "b_low") is None
    assert risk_alert_for(conn, "b_medium") is None
    assert risk_alert_for(conn, "b_unknown") is None
    assert _alert_rows(conn) == []
    assert webhook.posts == []


# ------------------------------------------------------------------------------------------------ cooldown
def test_cooldown_is_per_camera(conn, webhook: Webhook) -> None:
    first = _risk_alert(conn, "b1", "front_door")
    second_same_camera = _risk_alert(conn, "b2", "front_door", "critical", 90)
    other_camera = _risk_alert(conn, "b3", "garage")
    after_cooldown = _risk_alert(conn, "b4", "front_door")

    assert _hook(webhook.url).raise_alert(conn, first, now=NOW) == "sent"
    assert _hook(webhook.url).raise_alert(conn, second_same_camera, now=NOW + timedelta(seconds=60)) == "cooldown"
    assert _hook(webhook.url).raise_alert(conn, other_camera, now=NOW + timedelta(seconds=61)) == "sent"
    assert _hook(webhook.url).raise_alert(conn, after_cooldown, now=NOW + timedelta(seconds=COOLDOWN + 1)) == "sent"

    assert [(row[0], row[7]) for row in _alert_rows(conn)] == [
        ("b1:risk", "sent"),
        ("b2:risk", "cooldown"),
        ("b3:risk", "sent"),
        ("b4:risk", "sent"),
    ]
    # the alert in cooldown is stored (with its text) but not posted
    assert conn.execute("SELECT risk_level, summary FROM alerts WHERE alert_id = 'b2:risk'").fetchone() == (
        "critical",
        "critical at front_door",
    )
    assert [post["json"]["alert_id"] for post in webhook.posts] == ["b1:risk", "b3:risk", "b4:risk"]


# ------------------------------------------------------------------------------------------------ failures
def test_webhook_http_500_is_recorded_not_raised(conn, webhook: Webhook) -> None:
    webhook.mode = "error"
    status = _hook(webhook.url).raise_alert(conn, _risk_alert(conn, "b1", "front_door"), now=NOW)
    assert status == f"failed: {redacted_url(webhook.url)}: HTTP 500"
    assert _alert_rows(conn)[0][7] == status
    assert len(webhook.posts) == 1  # it was tried


def test_webhook_connection_refused_is_recorded_not_raised(conn) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
    status = _hook(url).raise_alert(conn, _risk_alert(conn, "b1", "front_door"), now=NOW)
    assert status.startswith(f"failed: {redacted_url(url)}: ")
    assert "ConnectError" in status
    assert _alert_rows(conn)[0][7] == status


def test_webhook_timeout_is_recorded_not_raised(conn, webhook: Webhook) -> None:
    webhook.mode = "hang"
    started = time.monotonic()
    status = _hook(webhook.url, timeout=0.5).raise_alert(conn, _risk_alert(conn, "b1", "front_door"), now=NOW)
    assert time.monotonic() - started < 3  # the resource's timeout, not the server, ended the post
    assert status == f"failed: {redacted_url(webhook.url)}: ReadTimeout"
    assert _alert_rows(conn)[0][7] == status
    assert len(webhook.posts) == 1


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://[::1", "<unparseable URL>"),
        ("not a url", "<unparseable URL>"),
        ("ftp://127.0.0.1/hook", "ftp://127.0.0.1/…"),
    ],
)
def test_malformed_webhook_url_is_recorded_not_raised(conn, url: str, shown: str) -> None:
    status = _hook(url).raise_alert(conn, _risk_alert(conn, "b1", "front_door"), now=NOW)
    assert status.startswith(f"failed: {shown}: ")
    assert _alert_rows(conn)[0][7] == status


def test_webhook_off_stores_disabled(conn) -> None:
    for webhook_url in (None, ""):
        batch_id = f"b_{webhook_url!r}"
        status = _hook(webhook_url).raise_alert(conn, _risk_alert(conn, batch_id, "front_door"), now=NOW)
        assert status == "disabled"
    assert [row[7] for row in _alert_rows(conn)] == ["disabled", "disabled"]


# ------------------------------------------------------------------------------------------------ idempotency
def test_raise_alert_is_idempotent_per_alert_id(conn, webhook: Webhook) -> None:
    alert = _risk_alert(conn, "b1", "front_door", "critical", 99)
    assert _hook(webhook.url, cooldown=0).raise_alert(conn, alert, now=NOW) == "sent"
    # re-evaluated later (cooldown 0, so only idempotency can stop a second post)
    assert _hook(webhook.url, cooldown=0).raise_alert(conn, alert, now=NOW + timedelta(hours=1)) is None
    assert conn.execute("SELECT count(*) FROM alerts WHERE alert_id = 'b1:risk'").fetchone()[0] == 1
    assert len(webhook.posts) == 1


# ------------------------------------------------------------------------------------------------ fast path
def test_unassessed_fast_path_batch_alerts_without_llm_text(conn, webhook: Webhook) -> None:
    _add_batch(conn, "fp_failed", "front_door", "fast_path", labels=("person",))
    _add_assessment(
        conn, "fp_failed", "front_door", "high", 80, status="invalid_output", summary="LLM text that must not be used"
    )
    _add_batch(conn, "fp_missing", "garage", "fast_path", labels=("person",))  # no assessment at all
    _add_batch(conn, "fp_ok", "backyard", "fast_path", labels=("person",))
    _add_assessment(conn, "fp_ok", "backyard", "low", 10)
    _add_batch(conn, "window_failed", "side_gate", "window", labels=("car",))
    _add_assessment(conn, "window_failed", "side_gate", None, None, status="invalid_output")

    assert unassessed_fast_path_alert(conn, "fp_ok") is None
    assert unassessed_fast_path_alert(conn, "window_failed") is None
    assert unassessed_fast_path_alert(conn, "no_such_batch") is None

    alert = unassessed_fast_path_alert(conn, "fp_failed")
    assert alert is not None
    assert (alert.alert_id, alert.kind, alert.camera_id) == (
        "fp_failed:unassessed",
        "fast_path_unassessed",
        "front_door",
    )
    assert alert.risk_level is None and alert.risk_score is None
    assert alert.summary == "fast-path detection (person) could not be assessed by the LLM"
    assert "LLM text" not in json.dumps(alert.payload())

    assert _hook(webhook.url).raise_alert(conn, alert, now=NOW) == "sent"
    missing = unassessed_fast_path_alert(conn, "fp_missing")
    assert missing is not None and missing.camera_id == "garage"
    assert _hook(webhook.url).raise_alert(conn, missing, now=NOW) == "sent"

    assert _alert_rows(conn) == [
        (
            "fp_failed:unassessed",
            "fp_failed",
            "front_door",
            "fast_path_unassessed",
            None,
            None,
            "fast-path detection (person) could not be assessed by the LLM",
            "sent",
        ),
        (
            "fp_missing:unassessed",
            "fp_missing",
            "garage",
            "fast_path_unassessed",
            None,
            None,
            "fast-path detection (person) could not be assessed by the LLM",
            "sent",
        ),
    ]
    assert webhook.posts[0]["json"] == {
        "alert_id": "fp_failed:unassessed",
        "kind": "fast_path_unassessed",
        "batch_id": "fp_failed",
        "camera_id": "front_door",
        "risk_level": None,
        "risk_score": None,
        "summary": "fast-path detection (person) could not be assessed by the LLM",
    }


# ------------------------------------------------------------------------------------------------ sensors
def test_alert_sensor_reads_new_materializations_once_and_posts(tmp_path: Path, webhook: Webhook) -> None:
    """The Dagster sensor: each new risk_assessments materialization is looked up once (cursor); high posts."""
    db = tmp_path / "alerts.duckdb"
    with connect(db) as c:
        _add_batch(c, "b-high", "porch")
        _add_assessment(c, "b-high", "porch", "high", 70)
        _add_batch(c, "b-low", "porch")
        _add_assessment(c, "b-low", "porch", "low", 5)
    res = resources(str(db), alert_webhook_url=webhook.url)
    with dg.instance_for_test() as instance:
        for key in ("b-high", "b-low"):
            instance.report_runless_asset_event(dg.AssetMaterialization("risk_assessments", partition=key))
        first = sensor_tick(high_risk_alert_sensor, instance, res, None)
        assert "2 assessments read, 1 alerts raised" in first.skip_message
        again = sensor_tick(high_risk_alert_sensor, instance, res, first.cursor)
        assert "0 assessments read" in again.skip_message
    assert [p["json"]["batch_id"] for p in webhook.posts] == ["b-high"]
    with connect(db) as c:
        assert c.execute("SELECT batch_id, webhook_status FROM alerts").fetchall() == [("b-high", "sent")]


def test_alert_sensor_survives_a_failing_webhook(tmp_path: Path, webhook: Webhook) -> None:
    webhook.mode = "error"
    db = tmp_path / "alerts.duckdb"
    with connect(db) as c:
        _add_batch(c, "b-crit", "porch")
        _add_assessment(c, "b-crit", "porch", "critical", 97)
    res = resources(str(db), alert_webhook_url=webhook.url)
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization("risk_assessments", partition="b-crit"))
        tick = sensor_tick(high_risk_alert_sensor, instance, res, None)
    assert "1 alerts raised" in tick.skip_message
    assert len(webhook.posts) == 1
    with connect(db) as c:
        assert c.execute("SELECT webhook_status FROM alerts").fetchall() == [
            (f"failed: {redacted_url(webhook.url)}: HTTP 500",)
        ]


def test_failed_run_of_a_fast_path_batch_alerts_once(tmp_path: Path, webhook: Webhook) -> None:
    """unassessed_fast_path_sensor on a real failed run of the batch's partition; the event delivered twice."""
    db = tmp_path / "alerts.duckdb"
    with connect(db) as c:
        _add_batch(c, "fp-1", "porch", "fast_path", labels=("person",))
    res = resources(str(db), alert_webhook_url=webhook.url)
    broken = {**res, "duckdb": HsiDuckDBResource(database=str(tmp_path))}  # a folder, not a DuckDB file
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("batches", ["fp-1"])
        failed = dg.materialize(
            [detection_batches], partition_key="fp-1", instance=instance, resources=broken, raise_on_error=False
        )
        assert not failed.success
        for _ in range(2):
            unassessed_fast_path_sensor(run_failure_context(failed, instance, res))
    assert [post["json"]["alert_id"] for post in webhook.posts] == ["fp-1:unassessed"]
    with connect(db) as c:
        assert c.execute("SELECT alert_id, kind, webhook_status FROM alerts").fetchall() == [
            ("fp-1:unassessed", "fast_path_unassessed", "sent")
        ]


# ------------------------------------------------------------------------------------------------ the URL is a secret
TOKEN = "tk-0f9e8d7c6b5a"


def test_redacted_url_keeps_scheme_and_host_only() -> None:
    assert redacted_url(f"https://user:{TOKEN}@ntfy.example:8443/alerts/{TOKEN}?auth={TOKEN}") == (
        "https://ntfy.example:8443/…"
    )
    assert redacted_url("http://[::1]:9/hook") == "http://[::1]:9/…"
    assert redacted_url("http://hooks.example") == "http://hooks.example"
    assert redacted_url("http://hooks.example:notaport/x") == "<unparseable URL>"


def test_a_token_in_the_webhook_url_reaches_the_webhook_but_never_the_alerts_table(conn, webhook: Webhook) -> None:
    """The URL carries its token in the path and the query: the POST goes to the full URL, and neither a sent nor a
    failed status (nor any other column) stores the token."""
    url = f"{webhook.url}/{TOKEN}?token={TOKEN}"
    hook = _hook(url)
    assert hook.raise_alert(conn, _risk_alert(conn, "b1", "front_door"), now=NOW) == "sent"
    webhook.mode = "error"
    failed = hook.raise_alert(conn, _risk_alert(conn, "b2", "garden"), now=NOW)
    assert failed == f"failed: {redacted_url(webhook.url)}: HTTP 500"
    assert [post["path"] for post in webhook.posts] == [f"/hook/{TOKEN}?token={TOKEN}"] * 2
    stored = conn.execute("SELECT * FROM alerts").fetchall()
    assert len(stored) == 2 and TOKEN not in repr(stored)


def test_the_webhook_url_is_a_secret_setting_handed_to_dagster_as_an_env_var(
    tmp_path: Path, webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ALERT_WEBHOOK_URL is a SecretStr: not in the settings' repr nor in the pipeline settings resource; the
    alert_webhook resource holds dg.EnvVar("ALERT_WEBHOOK_URL") (what the UI shows), resolved only when a sensor
    runs; a value in the settings file but not in the environment is warned about; unset = no EnvVar at all."""
    from hsi_dagster.definitions import build_resources, configuration_warnings
    from hsi_dagster.settings import load_settings

    url = f"{webhook.url}/{TOKEN}"
    env_file = tmp_path / "hsi.env"
    env_file.write_text(f"ALERT_WEBHOOK_URL={url}\nHSI_DUCKDB_PATH={tmp_path / 'alerts.duckdb'}\n")
    monkeypatch.delenv("ALERT_WEBHOOK_URL", raising=False)
    settings = load_settings(env_file)
    assert settings.alert_webhook_url == url and TOKEN not in repr(settings)
    built = build_resources(settings)
    hook = built["alert_webhook"]
    assert isinstance(hook.url, dg.EnvVar) and hook.url == "ALERT_WEBHOOK_URL"
    assert TOKEN not in repr(hook) and TOKEN not in repr(built["pipeline_settings"])
    assert "ALERT_WEBHOOK_URL" not in settings.plain_values()
    (warning,) = configuration_warnings(settings, {}, str(tmp_path))
    assert "ALERT_WEBHOOK_URL is set in the settings file" in warning and TOKEN not in warning
    assert configuration_warnings(settings, {"ALERT_WEBHOOK_URL": url}, str(tmp_path)) == []
    assert build_resources(load_settings(os.devnull))["alert_webhook"].url is None

    monkeypatch.setenv("ALERT_WEBHOOK_URL", url)
    with connect(settings.HSI_DUCKDB_PATH) as c:
        _add_batch(c, "b-high", "porch")
        _add_assessment(c, "b-high", "porch", "high", 70)
    res = resources(settings.HSI_DUCKDB_PATH)
    res["alert_webhook"] = hook
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization("risk_assessments", partition="b-high"))
        tick = sensor_tick(high_risk_alert_sensor, instance, res, None)
    assert "1 alerts raised" in tick.skip_message
    assert [post["path"] for post in webhook.posts] == [f"/hook/{TOKEN}"]


def test_hsi_commands_export_the_webhook_url_from_the_settings_file_for_their_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hsi process` / `hsi demo` workers resolve dg.EnvVar("ALERT_WEBHOOK_URL"): a URL kept in hsi.env only is
    exported by the command (cli/environment.py), as LLAMA_API_KEY is, so alerts keep posting."""
    from hsi_dagster.cli.environment import settings_with

    env_file = tmp_path / "hsi.env"
    env_file.write_text(f"ALERT_WEBHOOK_URL=http://127.0.0.1:9/hook/{TOKEN}\n")
    monkeypatch.setenv("HSI_ENV_FILE", str(env_file))
    monkeypatch.setenv("ALERT_WEBHOOK_URL", "")  # recorded, so the export below is undone after the test
    monkeypatch.delenv("ALERT_WEBHOOK_URL")
    settings_with()
    assert os.environ["ALERT_WEBHOOK_URL"] == f"http://127.0.0.1:9/hook/{TOKEN}"
