"""The Frigate listener of `hsi frigate listen` (cli/frigate.py starts it): Frigate's live MQTT events into DuckDB.

It keeps one MQTT v5 session (a stable client id, `clean_start` false, a session expiry) subscribed with
QoS 1 to `<prefix>/events`, `<prefix>/tracked_object_update` and `<prefix>/reviews`. Messages are acknowledged by
hand (paho-mqtt's `manual_ack`) only after the batch that holds them is committed to DuckDB, so a crash or a broker
restart never loses one: the broker redelivers what was not acknowledged, and a redelivery maps to the same
detection_id (a no-op). The client's Receive Maximum is the batch size, so the broker never has more messages in
flight than one batch. A batch is written when it holds FRIGATE_BATCH_SIZE messages or its oldest message waited
FRIGATE_BATCH_SECONDS, in one short connection (other writers only wait milliseconds for the file lock).
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hsi_dagster.core.frigate.fields import Resolution
from hsi_dagster.core.intake.detections import Bounds
from hsi_dagster.settings import HsiSettings

STATUS_EVERY_SECONDS = 2.0
RETRY_MAX_SECONDS = 30.0
RECONNECT_MAX_SECONDS = 30


@dataclass
class ListenStatus:
    """Written to --status-file (the compose health check and the tests read it)."""

    connected: bool = False
    connects: int = 0
    received: int = 0
    written: int = 0
    acknowledged: int = 0
    pending: int = 0
    detections: int = 0
    quarantined: int = 0
    last_error: str | None = None
    updated_at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class _Received:
    session: int  # connection number: a message of an earlier connection is redelivered, not acknowledged
    mid: int
    qos: int
    topic: str
    payload: bytes


class FrigateListener:
    """The MQTT client and the batch writer (see the module docstring)."""

    def __init__(
        self, settings: HsiSettings, db: str, resolutions: dict[str, Resolution], status_file: str | None = None
    ) -> None:
        self.settings = settings
        self.db = db
        self.resolutions = resolutions
        self.status_file = Path(status_file) if status_file else None
        self.status = ListenStatus()
        self.prefix = settings.FRIGATE_TOPIC_PREFIX.strip("/")
        self.source = f"mqtt://{settings.MQTT_HOST}:{settings.MQTT_PORT}/{self.prefix}"
        self.inbox: queue.Queue[_Received] = queue.Queue()
        self.session = 0
        self._lock = threading.Lock()
        self.client = self._client()

    def _client(self) -> Any:
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        from hsi_dagster.resources.mqtt_connection import mqtt_client

        settings = self.settings
        client = mqtt_client(
            settings.MQTT_CLIENT_ID,
            username=settings.MQTT_USERNAME,
            password=settings.MQTT_PASSWORD.get_secret_value() if settings.MQTT_PASSWORD else None,
            tls=settings.MQTT_TLS,
            ca_file=settings.MQTT_CA_FILE,
            manual_ack=True,
        )
        client.reconnect_delay_set(1, RECONNECT_MAX_SECONDS)
        self.connect_properties = Properties(PacketTypes.CONNECT)
        self.connect_properties.SessionExpiryInterval = settings.MQTT_SESSION_EXPIRY_SECONDS
        self.connect_properties.ReceiveMaximum = settings.FRIGATE_BATCH_SIZE
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        return client

    # --- paho's network thread ---
    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any) -> None:
        if reason_code.is_failure:
            self.status.last_error = f"broker refused the connection: {reason_code}"
            print(f"hsi frigate listen: {self.status.last_error}", file=sys.stderr, flush=True)
            return
        with self._lock:
            self.session += 1
            self.status.connected, self.status.connects = True, self.status.connects + 1
        # review items: their severity and the GenAI review summary (core/frigate/reviews.py)
        topics = [(f"{self.prefix}/{name}", 1) for name in ("events", "tracked_object_update", "reviews")]
        client.subscribe(topics)
        resumed = "resumed" if flags.session_present else "new"
        print(
            f"hsi frigate listen: connected to {self.settings.MQTT_HOST}:{self.settings.MQTT_PORT} ({resumed} session "
            f"{self.settings.MQTT_CLIENT_ID!r}), subscribed to {', '.join(t for t, _ in topics)}",
            flush=True,
        )

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any) -> None:
        with self._lock:
            self.session += 1  # what was received before is redelivered on the next connection
            self.status.connected = False
        print(f"hsi frigate listen: disconnected ({reason_code}); reconnecting", file=sys.stderr, flush=True)

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        with self._lock:
            session = self.session
            self.status.received += 1
        self.inbox.put(_Received(session, message.mid, message.qos, message.topic, bytes(message.payload)))

    # --- the writer (main thread) ---
    def _write_status(self) -> None:
        if self.status_file is None:
            return
        self.status.updated_at = time.time()
        temporary = self.status_file.with_name(self.status_file.name + ".tmp")
        temporary.write_text(json.dumps(self.status.__dict__), encoding="utf-8")
        os.replace(temporary, self.status_file)

    def _flush(self, batch: list[_Received]) -> bool:
        from hsi_dagster.storage.frigate import load_live_messages

        try:
            report = load_live_messages(
                self.db,
                [(m.topic, m.payload) for m in batch],
                source=self.source,
                resolutions=self.resolutions,
                bounds=Bounds.from_settings(self.settings),
            )
        except Exception as exc:  # the batch stays unacknowledged and is retried; nothing is lost
            self.status.last_error = f"{type(exc).__name__}: {exc}"
            print(f"hsi frigate listen: write failed, retrying: {self.status.last_error}", file=sys.stderr, flush=True)
            return False
        with self._lock:
            current = self.session
        acknowledged = 0
        for message in batch:
            if message.session == current and message.qos > 0:
                self.client.ack(message.mid, message.qos)
                acknowledged += 1
        self.status.written += len(batch)
        self.status.acknowledged += acknowledged
        self.status.detections += report.detections
        self.status.quarantined += report.quarantined
        self.status.last_error = None
        print(
            f"hsi frigate listen: {len(batch)} messages -> {report.detections} detections, {report.duplicates} "
            f"already stored, {report.unchanged} unchanged, {report.false_positives} false positives, "
            f"{report.ignored} not detections, {report.quarantined} quarantined, {report.reviews} reviews "
            f"({report.reviews_without_detections} with no detection), {report.joined} late descriptions joined",
            flush=True,
        )
        return True

    def run(self, stop: threading.Event) -> None:
        settings = self.settings
        self.client.connect_async(
            settings.MQTT_HOST,
            settings.MQTT_PORT,
            keepalive=30,
            clean_start=False,
            properties=self.connect_properties,
        )
        self.client.loop_start()
        batch: list[_Received] = []
        oldest = 0.0
        retry_at, retry_delay = 0.0, 1.0
        status_at = 0.0
        try:
            while True:
                stopping = stop.is_set()
                try:
                    message = self.inbox.get(timeout=0.1)
                    if not batch:
                        oldest = time.monotonic()
                    batch.append(message)
                    if len(batch) < settings.FRIGATE_BATCH_SIZE and not stopping:
                        continue
                except queue.Empty:
                    pass
                now = time.monotonic()
                due = len(batch) >= settings.FRIGATE_BATCH_SIZE or now - oldest >= settings.FRIGATE_BATCH_SECONDS
                if batch and (due or stopping) and now >= retry_at:
                    if self._flush(batch):
                        batch, retry_delay = [], 1.0
                    else:
                        retry_at, retry_delay = now + retry_delay, min(retry_delay * 2, RETRY_MAX_SECONDS)
                self.status.pending = len(batch)
                if now - status_at >= STATUS_EVERY_SECONDS or stopping:
                    self._write_status()
                    status_at = now
                if stopping and (not batch or now >= retry_at + RETRY_MAX_SECONDS):
                    break
        finally:
            self.client.disconnect()
            self.client.loop_stop()
            self.status.connected = False
            self._write_status()
