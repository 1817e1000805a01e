"""The household's corrections over MQTT, taken by the verdict publisher's session (sensors/verdict_publisher.py).

Why there: the Home Assistant buttons exist exactly while the publisher runs (it sends their discovery), and its
session is persistent (clean_start false, a session expiry longer than the will delay): between two ticks the
broker queues what arrives on `<prefix>/+/correction` (QoS 1) and delivers it when the next tick resumes the
session. Each message is stored, or refused and counted (storage/corrections.py), and only then acknowledged, so a
crash or a lost connection redelivers it; a redelivery is the same correction (one row).

Bounds on a flood: at most CORRECTIONS_PER_CAMERA_PER_HOUR stored per camera per hour (the rest refused, field
`rate`), at most MAX_COMMANDS_PER_TICK handled per tick (the rest stay queued at the broker, whose own queue limit,
mosquitto's max_queued_messages, drops what exceeds it), payloads over PAYLOAD_MAX_BYTES refused unread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from hsi_dagster.core.outbound.corrections import CorrectionRefused, Refusal, command_camera, parse_command
from hsi_dagster.core.outbound.mqtt_messages import Topics
from hsi_dagster.resources import HsiDuckDBResource
from hsi_dagster.resources.mqtt import MqttSession, Received
from hsi_dagster.storage.corrections import correct, record_refusal

MAX_COMMANDS_PER_TICK = 500
MORE_WAIT_SECONDS = 0.2  # after a group is stored and acknowledged, how long to wait for the broker to send more


@dataclass
class CommandReport:
    stored: int = 0
    repeated: int = 0
    refused: list[str] = field(default_factory=list)  # "yard: level: 'severe' is not one of ..."

    def summary(self) -> str:
        if not (self.stored or self.repeated or self.refused):
            return ""
        return f"; corrections: {self.stored} stored, {self.repeated} repeats, {len(self.refused)} refused"


def handle_commands(
    database: HsiDuckDBResource,
    messages: Sequence[Received],
    topics: Topics,
    per_hour: int,
    now: Callable[[], datetime],
    report: CommandReport,
) -> None:
    """Store or refuse each message, in one transaction (the caller acknowledges them afterwards)."""
    with database.get_connection() as conn:
        for message in messages:
            camera = command_camera(message.topic, topics.prefix) or "?"
            try:
                if message.retain:  # a retained command would be applied again at every new subscription
                    raise CorrectionRefused(Refusal("payload", "a retained message; send corrections unretained"))
                request = parse_command(message.payload)
            except CorrectionRefused as refused:
                record_refusal(conn, "mqtt", refused.refusal, now())
                report.refused.append(f"{camera}: {refused}")
                continue
            try:
                _, new = correct(conn, request, now(), camera_slug=camera, per_hour=per_hour)
            except CorrectionRefused as refused:  # counted by correct()
                report.refused.append(f"{camera}: {refused}")
                continue
            report.stored, report.repeated = report.stored + new, report.repeated + (not new)


def take_commands(
    session: MqttSession,
    database: HsiDuckDBResource,
    topics: Topics,
    per_hour: int,
    now: Callable[[], datetime],
    report: CommandReport,
    *,
    wait_seconds: float = 0.0,
) -> None:
    """Handle what the session received (waiting up to `wait_seconds` for it), then what follows the
    acknowledgements, up to MAX_COMMANDS_PER_TICK."""
    handled, wait = 0, wait_seconds
    while handled < MAX_COMMANDS_PER_TICK:
        messages = session.received(wait, limit=MAX_COMMANDS_PER_TICK - handled)
        if not messages:
            return
        handle_commands(database, messages, topics, per_hour, now, report)
        session.ack(messages)
        handled, wait = handled + len(messages), MORE_WAIT_SECONDS
