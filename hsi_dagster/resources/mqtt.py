"""`MqttPublisherResource`: the broker the verdicts are published on (paho-mqtt, MQTT v5, QoS 1).

Each sensor tick opens one short session: connect (bounded by MQTT_CONNECT_TIMEOUT_SECONDS), publish, wait for
every PUBACK, disconnect. Availability without a process that stays connected: the connection's last will is
`offline` (retained) with a Will Delay Interval, and the session outlives the connection (clean_start false, a
session expiry). The tick's `online` is retained; it ends with DISCONNECT "with will message", so the broker
publishes `offline` only if no new connection resumes the session within the delay, i.e. once the ticks stop
(MQTT 5, section 3.1.3.2.2). A crash or a lost network publishes the will the same way.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg

from hsi_dagster.core.outbound.mqtt_messages import AVAILABLE, NOT_AVAILABLE, Message, Topics, check_topic_prefix
from hsi_dagster.resources.mqtt_connection import MqttWill, mqtt_client
from hsi_dagster.settings import HsiSettings

WILL_DELAY_SECONDS = 120  # the entities turn unavailable this long after the last tick (ticks every 15 s)
SESSION_EXPIRY_SECONDS = 600  # longer than the will delay: the next tick resumes the session, cancelling the will
MAX_IN_FLIGHT = 50  # messages published before waiting for their acknowledgements
_DISCONNECT_WITH_WILL = 4  # MQTT 5 DISCONNECT reason code 0x04


class MqttError(RuntimeError):
    """The broker could not be used; the message names it and what happened."""


class MqttUnavailable(MqttError):
    """No answer (nothing listening, a firewall, a broker that never sends CONNACK) within the timeout."""


class MqttRefused(MqttError):
    """The broker answered and refused the connection (credentials, authorisation, client id)."""


@dataclass(frozen=True)
class Received:
    """A message the session's subscription delivered; acknowledged only by `MqttSession.ack` (after it is stored)."""

    topic: str
    payload: bytes
    mid: int
    qos: int
    retain: bool


class MqttSession:
    """One connected client; `publish` returns how many of the messages were acknowledged, in order. The
    publisher's session also receives: what its subscriptions deliver waits in `inbox` until `received` takes it."""

    def __init__(self, client: Any, timeout_seconds: float, inbox: queue.Queue[Received] | None = None) -> None:
        self.client = client
        self.timeout_seconds = timeout_seconds
        self.inbox: queue.Queue[Received] = inbox if inbox is not None else queue.Queue()

    def subscribe(self, topic_filter: str) -> bool:
        """Subscribe with QoS 1 and wait for the SUBACK (False when none came within the timeout). Messages the
        broker queued for the session arrive before the SUBACK, so they are in `inbox` once it returns True."""
        from paho.mqtt.subscribeoptions import SubscribeOptions

        answered = threading.Event()
        self.client.on_subscribe = lambda client, userdata, mid, codes, properties: answered.set()
        # never the retained messages at subscribe: a retained command would be applied again at every tick
        options = SubscribeOptions(qos=1, retainHandling=SubscribeOptions.RETAIN_DO_NOT_SEND)
        result, _ = self.client.subscribe(topic_filter, options=options)
        return result == 0 and answered.wait(self.timeout_seconds)

    def received(self, wait_seconds: float = 0.0, limit: int = 1000) -> list[Received]:
        """What arrived so far (at most `limit`), waiting up to `wait_seconds` for the first one."""
        taken: list[Received] = []
        try:
            taken.append(self.inbox.get(timeout=wait_seconds) if wait_seconds > 0 else self.inbox.get_nowait())
            while len(taken) < limit:
                taken.append(self.inbox.get_nowait())
        except queue.Empty:
            pass
        return taken

    def ack(self, messages: Sequence[Received]) -> None:
        """Acknowledge messages once they are stored: one never acknowledged is redelivered when the session
        resumes (the next tick)."""
        for message in messages:
            if message.qos > 0:
                self.client.ack(message.mid, message.qos)

    def publish(self, messages: Sequence[Message]) -> int:
        """Publish with QoS 1 and wait for the PUBACKs (at most MAX_IN_FLIGHT outstanding); the count of messages
        acknowledged before the first that was not (a lost connection, a timeout)."""
        acknowledged = 0
        for start in range(0, len(messages), MAX_IN_FLIGHT):
            chunk = messages[start : start + MAX_IN_FLIGHT]
            infos = [self.client.publish(m.topic, m.payload, qos=1, retain=m.retain) for m in chunk]
            deadline = time.monotonic() + self.timeout_seconds
            for info in infos:
                if info.rc != 0:
                    return acknowledged
                try:
                    info.wait_for_publish(timeout=max(0.0, deadline - time.monotonic()))
                except (RuntimeError, ValueError):
                    return acknowledged
                if not info.is_published():
                    return acknowledged
                acknowledged += 1
        return acknowledged

    def read_retained(self, topic: str, wait_seconds: float = 1.0) -> bytes | None:
        """The retained payload on `topic`, or None when there is none within `wait_seconds`."""
        got: list[bytes] = []
        arrived = threading.Event()

        def on_message(client: Any, userdata: Any, message: Any) -> None:
            if message.topic == topic:
                got.append(bytes(message.payload))
                arrived.set()

        self.client.on_message = on_message
        self.client.subscribe(topic, qos=1)
        arrived.wait(wait_seconds)
        self.client.unsubscribe(topic)
        return got[0] if got else None


# the publisher's fields read from the MQTT_* setting of their name (host <- MQTT_HOST); from_settings names the rest
_MQTT_NAMED_ALIKE = (
    "host",
    "port",
    "username",
    "tls",
    "ca_file",
    "topic_prefix",
    "discovery_prefix",
    "connect_timeout_seconds",
)


class MqttPublisherResource(dg.ConfigurableResource):
    """The outbound broker (MQTT_HOST, MQTT_PORT, MQTT_TLS, MQTT_USERNAME, MQTT_PASSWORD via dg.EnvVar) and topics."""

    enabled: bool = False  # MQTT_PUBLISH: publish verdicts at all
    host: str = "127.0.0.1"
    port: int = 1883
    username: str | None = None
    password: str | None = None  # MQTT_PASSWORD, as dg.EnvVar in the definitions: never a plain value there
    tls: bool = False
    ca_file: str | None = None
    client_id: str = "hsi-verdicts"
    topic_prefix: str = "hsi"
    discovery_prefix: str = "homeassistant"
    connect_timeout_seconds: float = 5.0
    will_delay_seconds: int = WILL_DELAY_SECONDS  # entities unavailable this long after the ticks stop

    @classmethod
    def from_settings(cls, settings: HsiSettings, password: Any) -> MqttPublisherResource:
        """The MQTT_* settings; `password` is dg.EnvVar("MQTT_PASSWORD") in the definitions, the plain secret in
        the CLI (None when unset)."""
        named_alike = {name: getattr(settings, f"MQTT_{name.upper()}") for name in _MQTT_NAMED_ALIKE}
        return cls(
            **named_alike, enabled=settings.MQTT_PUBLISH, client_id=settings.MQTT_PUBLISH_CLIENT_ID, password=password
        )

    @property
    def broker(self) -> str:
        return f"mqtt{'s' if self.tls else ''}://{self.host}:{self.port}"

    @property
    def topics(self) -> Topics:
        return Topics(
            check_topic_prefix(self.topic_prefix, "MQTT_TOPIC_PREFIX"),
            check_topic_prefix(self.discovery_prefix, "MQTT_DISCOVERY_PREFIX"),
        )

    def _client(self, client_id: str, *, with_will: bool) -> Any:
        will = MqttWill(self.topics.availability, NOT_AVAILABLE, self.will_delay_seconds) if with_will else None
        client = mqtt_client(
            client_id,
            username=self.username,
            password=self.password,
            tls=self.tls,
            ca_file=self.ca_file,
            will=will,
            manual_ack=with_will,  # the publisher's session acknowledges a correction once it is stored
        )
        client.max_inflight_messages_set(MAX_IN_FLIGHT)
        client.reconnect_delay_set(1, 5)
        return client

    def _connect(self, client: Any, *, resume_session: bool) -> None:
        """Connect and wait for the CONNACK: MqttRefused / MqttUnavailable say why not, naming the broker."""
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        answered = threading.Event()
        outcome: dict[str, Any] = {}

        def on_connect(client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any) -> None:
            outcome["reason"] = reason_code
            answered.set()

        def on_connect_fail(client: Any, userdata: Any) -> None:  # the TCP (or TLS) connection failed
            outcome["failed"] = True
            answered.set()

        client.on_connect = on_connect
        client.on_connect_fail = on_connect_fail
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = (
            max(SESSION_EXPIRY_SECONDS, 2 * self.will_delay_seconds) if resume_session else 0
        )
        client.connect_async(self.host, self.port, keepalive=30, clean_start=not resume_session, properties=properties)
        client.loop_start()
        answered.wait(self.connect_timeout_seconds)
        if "reason" not in outcome:
            _stop(client)
            why = (
                "the connection failed: refused, unreachable, or the TLS handshake failed"
                if outcome.get("failed")
                else f"did not answer within {self.connect_timeout_seconds:g} s: no CONNACK"
            )
            raise MqttUnavailable(
                f"MQTT broker {self.broker}: {why}; is it running and reachable (MQTT_HOST, MQTT_PORT, MQTT_TLS)?"
            )
        reason = outcome["reason"]
        if reason.is_failure:
            _stop(client)
            hint = ""
            if reason.value in (0x86, 0x87, 0x04, 0x05):  # bad user name or password, not authorized (v5 and v3)
                hint = ": check MQTT_USERNAME and MQTT_PASSWORD"
            raise MqttRefused(f"MQTT broker {self.broker} refused the connection ({reason}){hint}")

    @contextmanager
    def session(self) -> Iterator[MqttSession]:
        """The publisher's session: `online` retained on entry, the will armed for when the ticks stop. Messages for
        its subscriptions (the correction commands) are collected from the CONNACK on, before anyone asks."""
        client = self._client(self.client_id, with_will=True)
        inbox: queue.Queue[Received] = queue.Queue()
        client.on_message = lambda client, userdata, message: inbox.put(
            Received(message.topic, bytes(message.payload), message.mid, message.qos, bool(message.retain))
        )
        self._connect(client, resume_session=True)
        session = MqttSession(client, self.connect_timeout_seconds, inbox)
        try:
            session.publish([Message(self.topics.availability, AVAILABLE.encode(), retain=True)])
            yield session
        finally:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.reasoncodes import ReasonCode

            client.disconnect(reasoncode=ReasonCode(PacketTypes.DISCONNECT, identifier=_DISCONNECT_WITH_WILL))
            _stop(client)

    @contextmanager
    def probe(self) -> Iterator[MqttSession]:
        """A separate, clean session (no will, its own client id): `hsi mqtt status` and the tests' subscribers."""
        client = self._client(f"{self.client_id}-status", with_will=False)
        self._connect(client, resume_session=False)
        try:
            yield MqttSession(client, self.connect_timeout_seconds)
        finally:
            client.disconnect()
            _stop(client)


def _stop(client: Any) -> None:
    with contextlib.suppress(Exception):  # the network thread is gone already
        client.loop_stop()
