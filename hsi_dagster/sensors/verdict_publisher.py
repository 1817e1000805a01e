"""verdict_publisher_sensor: stored verdicts -> MQTT (per-camera retained state, events, Home Assistant discovery).

The truth of what was sent is the outbox in DuckDB (storage/mqtt_outbox.py), keyed by batch: a unit (a verdict's
event and state, an evidence alert's event) is recorded once the broker acknowledged all its messages, so a
restart sends nothing recorded again and skips nothing unrecorded; a broker that is down leaves everything pending
for the next tick. The window a duplicate can still come from: a kill after the broker's PUBACK and before the
outbox commit; such a repeat carries the same `event_id`. The Dagster cursor shows the last tick's counts.

A tick reads its work in one short database connection, talks to the broker without holding the database, and
records each group of acknowledged units in one transaction. Nothing here raises: a broker, database or payload
problem is logged, recorded for `hsi mqtt status`, and retried at the next tick.

The same session takes the household's corrections from `<prefix>/+/correction` (sensors/correction_commands.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg
import duckdb

from hsi_dagster.core.outbound.mqtt_messages import (
    Message,
    Unit,
    camera_key,
    camera_topics,
    discovery_digest,
    discovery_messages,
    initial_state_unit,
    plan_camera,
    removal_messages,
)
from hsi_dagster.resources import HsiDuckDBResource, PipelineSettingsResource
from hsi_dagster.resources.mqtt import MqttError, MqttPublisherResource
from hsi_dagster.sensors.correction_commands import CommandReport, take_commands
from hsi_dagster.sensors.default_status import default_status_when
from hsi_dagster.storage import mqtt_outbox

MAX_VERDICTS_PER_TICK = 500
UNITS_PER_COMMIT = 100  # per outbox commit (~50 ms each: a DuckDB connection); also the most a crash repeats


@dataclass
class PublishReport:
    connected: bool = False
    discovered: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    units: int = 0
    events: int = 0
    states: int = 0
    pending: int = 0
    error: str | None = None
    commands: CommandReport = field(default_factory=CommandReport)  # the household's corrections taken this tick

    def summary(self) -> str:
        if self.error:
            return (
                f"not published: {self.error}; {self.pending} verdicts/alerts wait for the next tick"
                + self.commands.summary()
            )
        return (
            f"{self.units} verdicts/alerts published ({self.events} events, {self.states} states); discovery sent for "
            f"{len(self.discovered)} cameras, removed for {len(self.removed)}; {self.pending} still pending"
            + self.commands.summary()
        )


@dataclass(frozen=True)
class _Work:
    units: list[Unit]
    discovery: list[tuple[str, list[Message], str]]  # camera, configs, digest
    removals: list[tuple[str, list[Message]]]


def _plan(
    conn: duckdb.DuckDBPyConnection,
    configured: Sequence[str] | None,
    mqtt: MqttPublisherResource,
    now: datetime,
    limit: int,
) -> _Work:
    """What this tick sends: discovery for new or changed cameras, removal for cameras no longer configured, and
    the pending verdicts and alerts as units per camera."""
    topics = mqtt.topics
    since = mqtt_outbox.publisher_since(conn, now)
    verdicts = mqtt_outbox.unpublished_verdicts(conn, since, limit)
    alerts = mqtt_outbox.unpublished_evidence_alerts(conn, since, limit)
    known = mqtt_outbox.cameras(conn)
    wanted = set(configured if configured is not None else mqtt_outbox.assessed_cameras(conn))
    wanted |= {v.camera_id for v in verdicts} | {a.camera_id for a in alerts}
    discovery = []
    for camera_id in sorted(wanted):
        configs = discovery_messages(camera_key(camera_id), topics)
        digest = discovery_digest(configs)
        record = known.get(camera_id)
        if record is None or record.removed_at is not None or record.discovery_sha256 != digest:
            stale = set(record.retained_topics) - set(camera_topics(camera_key(camera_id), topics)) if record else set()
            discovery.append((camera_id, removal_messages(sorted(stale), camera_id) + configs, digest))
    removals = [
        (camera_id, removal_messages(record.retained_topics, camera_id))
        for camera_id, record in sorted(known.items())
        if camera_id not in wanted and record.removed_at is None
    ]
    busy = {v.camera_id for v in verdicts}
    stateless = [c for c in sorted(wanted - busy) if known.get(c) is None or known[c].last_window_start is None]
    units = [initial_state_unit(v, topics) for v in mqtt_outbox.latest_verdicts(conn, stateless, since)]
    for camera_id in sorted({v.camera_id for v in verdicts} | {a.camera_id for a in alerts}):
        record = known.get(camera_id)
        retained = record.last_window_start if record and record.removed_at is None else None
        units += plan_camera(
            camera_id,
            [v for v in verdicts if v.camera_id == camera_id],
            [a for a in alerts if a.camera_id == camera_id],
            retained,
            topics,
        )
    return _Work(units, discovery, removals)


def publish_pending(
    database: HsiDuckDBResource,
    mqtt: MqttPublisherResource,
    configured_cameras: Sequence[str] | None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    limit: int = MAX_VERDICTS_PER_TICK,
    corrections_per_hour: int = 20,
) -> PublishReport:
    """One tick's work (see the module docstring); `configured_cameras` None = every camera with a verdict. The
    household's corrections the session received are stored first and after (sensors/correction_commands.py)."""
    report = PublishReport()
    topics = mqtt.topics
    with database.get_connection() as conn:
        work = _plan(conn, configured_cameras, mqtt, now(), limit)
    report.pending = len(work.units)
    try:
        with mqtt.session() as session:
            report.connected = True
            if session.subscribe(topics.corrections):  # what was queued since the last tick is in by the SUBACK
                take_commands(session, database, topics, corrections_per_hour, now, report.commands)
            for camera_id, messages, digest in work.discovery:
                if session.publish(messages) < len(messages):
                    raise MqttError(f"the broker stopped acknowledging (discovery of {camera_id})")
                retained = camera_topics(camera_key(camera_id), topics)
                with database.get_connection() as conn:
                    mqtt_outbox.record_discovery(conn, camera_id, retained, digest, now())
                report.discovered.append(camera_id)
            for camera_id, messages in work.removals:
                if session.publish(messages) < len(messages):
                    raise MqttError(f"the broker stopped acknowledging (removal of {camera_id})")
                with database.get_connection() as conn:
                    mqtt_outbox.record_removal(conn, camera_id, now())
                report.removed.append(camera_id)
            for start in range(0, len(work.units), UNITS_PER_COMMIT):
                group = work.units[start : start + UNITS_PER_COMMIT]
                messages = [message for unit in group for message in unit.messages]
                acknowledged = session.publish(messages)
                done, counted = [], 0
                for unit in group:  # a unit counts once all its messages are acknowledged
                    counted += len(unit.messages)
                    if counted > acknowledged:
                        break
                    done.append(unit)
                with database.get_connection() as conn:
                    mqtt_outbox.record_published(
                        conn,
                        [mqtt_outbox.Published(u.key, u.camera_id, u.batch_id, u.sent, u.window_start) for u in done],
                        now(),
                    )
                report.units += len(done)
                report.events += sum(1 for u in done for m in u.messages if not m.retain)
                report.states += sum(1 for u in done if "state" in u.sent.split("+"))
                if len(done) < len(group):
                    raise MqttError("the broker stopped acknowledging; the rest waits for the next tick")
            take_commands(session, database, topics, corrections_per_hour, now, report.commands)
    except MqttError as exc:
        report.error = str(exc)
    report.pending -= report.units
    with database.get_connection() as conn:
        mqtt_outbox.record_connection(conn, report.error, now())
    return report


def _publish_default_status() -> dg.DefaultSensorStatus:
    """Running by default only when MQTT_PUBLISH is true where the code location loads."""
    return default_status_when(lambda settings: settings.MQTT_PUBLISH)


@dg.sensor(minimum_interval_seconds=15, default_status=_publish_default_status())
def verdict_publisher_sensor(
    context: dg.SensorEvaluationContext,
    duckdb: HsiDuckDBResource,
    mqtt: MqttPublisherResource,
    pipeline_settings: PipelineSettingsResource,
) -> dg.SkipReason:
    """New verdicts and evidence alerts -> MQTT (state, events, Home Assistant discovery); never raises."""
    if not mqtt.enabled:
        return dg.SkipReason("MQTT_PUBLISH is off")
    try:
        settings = pipeline_settings.get()
        profiles = pipeline_settings.camera_profiles() if settings.CAMERA_CONTEXT_PATH else None
        report = publish_pending(
            duckdb,
            mqtt,
            sorted(profiles) if profiles is not None else None,
            corrections_per_hour=settings.CORRECTIONS_PER_CAMERA_PER_HOUR,
        )
    except Exception as exc:  # a database, settings or profile problem: said, and retried at the next tick
        context.log.error(f"verdict publisher: {type(exc).__name__}: {exc}")
        return dg.SkipReason(f"verdict publisher failed: {type(exc).__name__}: {exc}")
    if report.error:
        context.log.warning(f"verdict publisher: {report.error}")
    for refused in report.commands.refused[:20]:
        context.log.warning(f"correction refused: {refused}")
    context.update_cursor(
        json.dumps(
            {
                "published": report.units,
                "pending": report.pending,
                "error": report.error,
                "corrections": report.commands.stored,
                "corrections_refused": len(report.commands.refused),
            }
        )
    )
    return dg.SkipReason(report.summary())
