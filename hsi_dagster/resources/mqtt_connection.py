"""The one MQTT client set-up (paho-mqtt): client id, MQTT v5, credentials, TLS and the last will.

Both MQTT users build their client here: the Frigate listener (`hsi frigate listen`, cli/frigate_listen.py) and
the verdict publisher (resources/mqtt.py). It lives in resources/ because that is the lowest layer both may import
(cli/ sits above resources/ in tests/test_layout.py's LAYERS); it holds no Dagster code. What differs between them
(manual acknowledgements, the in-flight limit, the reconnect delays, the session) stays with each caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MqttWill:
    """The message the broker publishes when the connection ends without a clean DISCONNECT (or with reason code
    0x04), `delay_seconds` after it (MQTT 5 Will Delay Interval): resuming the session within the delay cancels it."""

    topic: str
    payload: str
    delay_seconds: int = 0
    retain: bool = True


def mqtt_client(
    client_id: str,
    *,
    username: str | None = None,
    password: str | None = None,
    tls: bool = False,
    ca_file: str | None = None,
    will: MqttWill | None = None,
    manual_ack: bool = False,
) -> Any:
    """A paho-mqtt client speaking MQTT v5 (callback API 2) as `client_id`; the credentials only when a user name is
    given, TLS with `ca_file` (None: the system's CAs), the will at QoS 1. Not connected yet."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5, manual_ack=manual_ack
    )
    if username:
        client.username_pw_set(username, password or None)
    if tls:
        client.tls_set(ca_certs=ca_file or None)
    if will is not None:
        properties = Properties(PacketTypes.WILLMESSAGE)
        properties.WillDelayInterval = will.delay_seconds
        client.will_set(will.topic, will.payload, qos=1, retain=will.retain, properties=properties)
    return client
