"""`hsi mqtt status`: is the broker there, what did the verdict publisher send last per camera, what waits.

The connection is checked with a separate clean session (`<MQTT_PUBLISH_CLIENT_ID>-status`, no will), so asking
never disturbs the publisher's session; a broker that never answers is reported after MQTT_CONNECT_TIMEOUT_SECONDS
(or --timeout). Exit 0 when the broker accepted the connection, 1 otherwise (a health check can use it).
The model trust behind the latest verdicts is listed too, with a warning when it was not measured
(core/verdict/trust.py), and the household's corrections per camera with the refused ones by field.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from hsi_dagster.core.verdict.trust import DEFAULT
from hsi_dagster.settings import HsiSettings


def _broker_check(settings: HsiSettings, timeout: float) -> dict[str, Any]:
    from hsi_dagster.resources.mqtt import MqttError, MqttPublisherResource

    password = settings.MQTT_PASSWORD.get_secret_value() if settings.MQTT_PASSWORD else None
    mqtt = MqttPublisherResource.from_settings(settings, password).model_copy(
        update={"connect_timeout_seconds": timeout}
    )
    started = time.monotonic()
    result: dict[str, Any] = {"broker": mqtt.broker, "connected": False}
    try:
        with mqtt.probe() as session:
            result["connected"] = True
            result["connect_seconds"] = round(time.monotonic() - started, 3)
            availability = session.read_retained(mqtt.topics.availability, wait_seconds=min(1.0, timeout))
            result["availability"] = availability.decode("utf-8", errors="replace") if availability else None
    except MqttError as exc:
        result["error"] = str(exc)
    return result


def _stored(settings: HsiSettings) -> dict[str, Any]:
    from hsi_dagster.storage import mqtt_outbox
    from hsi_dagster.storage.corrections import correction_counts, refusal_counts
    from hsi_dagster.storage.db import DatabaseNotFound, connect
    from hsi_dagster.storage.frigate_writeback import writeback_counts
    from hsi_dagster.storage.trust import recent_trust

    try:
        with connect(settings.HSI_DUCKDB_PATH, read_only=True) as conn:
            trust = recent_trust(conn)
            corrections = {"per_camera": correction_counts(conn), "refused": refusal_counts(conn)}
            if not mqtt_outbox.outbox_exists(conn):
                return {
                    "publisher": None,
                    "cameras": [],
                    "backlog": {},
                    "frigate_writeback": {},
                    "trust": trust,
                    "corrections": corrections,
                }
            return {
                "corrections": corrections,
                "publisher": mqtt_outbox.publisher_state(conn),
                "cameras": mqtt_outbox.last_publish_per_camera(conn),
                "backlog": mqtt_outbox.backlog(conn),
                "frigate_writeback": writeback_counts(conn),
                "trust": trust,
            }
    except DatabaseNotFound:
        return {"publisher": None, "cameras": [], "backlog": {}, "frigate_writeback": {}, "trust": []}


def _print_text(status: dict[str, Any], settings: HsiSettings) -> None:
    broker = status["broker"]
    if broker["connected"]:
        print(f"broker {broker['broker']}: connected in {broker['connect_seconds']:g} s")
        availability = broker.get("availability")
        print(
            f"availability ({settings.MQTT_TOPIC_PREFIX}/availability, retained): {availability or 'never published'}"
        )
    else:
        print(f"broker {broker['broker']}: NOT CONNECTED: {broker['error']}")
    publisher = status["publisher"]
    print(f"publishing: {'on' if settings.MQTT_PUBLISH else 'off'} (MQTT_PUBLISH)", end="")
    if publisher:
        print(
            f"; since {publisher['since']}, last tick {publisher['last_tick_at']}, last connected "
            f"{publisher['last_connected_at'] or 'never'}"
            + (f", last error: {publisher['last_error']}" if publisher["last_error"] else "")
        )
    else:
        print("; nothing published yet")
    backlog = status["backlog"]
    cameras = {row["camera_id"]: row for row in status["cameras"]}
    for camera in sorted(set(cameras) | set(backlog)):
        row = cameras.get(camera, {})
        print(
            f"  {camera}: last publish {row.get('last_published_at') or 'never'}"
            f" ({row.get('last_sent') or '-'}, batch {row.get('last_batch_id') or '-'}),"
            f" {row.get('published', 0)} published, {backlog.get(camera, 0)} waiting,"
            f" Home Assistant entities {'yes' if row.get('entities') else 'no'}"
        )
    print(f"backlog: {sum(backlog.values())} verdicts/alerts waiting")
    for row in status.get("trust", []):
        mark = "WARNING unmeasured " if row["trust_source"] == DEFAULT else ""
        print(
            f"{mark}model trust {row['model_trust']} for {row['model'] or 'unknown model'} ({row['trust_reason']}):"
            f" {row['verdicts']} of the latest verdicts, last {row['last_at']}"
        )
    corrections = status.get("corrections") or {}
    for camera, ways in sorted((corrections.get("per_camera") or {}).items()):
        text = ", ".join(f"{count} {way}" for way, count in sorted(ways.items()))
        print(f"corrections {camera}: {sum(ways.values())} verdicts corrected ({text})")
    for row in corrections.get("refused") or []:
        print(
            f"corrections refused ({row['source']}, {row['field']}): {row['refused']}, last {row['last_at']}:"
            f" {row['last_reason']}"
        )
    if status["frigate_writeback"]:
        counts = ", ".join(f"{count} {state}" for state, count in status["frigate_writeback"].items())
        print(f"frigate write-back ({settings.FRIGATE_WRITEBACK}): {counts}")


def cmd_status(args: argparse.Namespace, settings: HsiSettings) -> int:
    timeout = args.timeout or settings.MQTT_CONNECT_TIMEOUT_SECONDS
    status = {"broker": _broker_check(settings, timeout), **_stored(settings)}
    if args.json:
        print(json.dumps(status, default=str))
    else:
        _print_text(status, settings)
    return 0 if status["broker"]["connected"] else 1


def add_mqtt_parser(sub: Any, with_db: Any) -> None:
    """`hsi mqtt ...` on the one argparse tree of cli/main.py."""
    mqtt = sub.add_parser("mqtt", help="verdicts published on MQTT (Home Assistant)")
    commands = mqtt.add_subparsers(dest="mqtt_command", required=True)
    p = with_db(commands.add_parser("status", help="broker connection, last publish per camera, backlog"))
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="default: MQTT_CONNECT_TIMEOUT_SECONDS")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(mqtt_func=cmd_status)
