"""The sensors, one module each: closed batch windows -> runs (`batch_windows`, and `inbox` which also loads dropped
files), risky assessments -> alerts (`alerts`), evidence-only alerts between inbox ticks (`evidence_watch`),
Frigate's API -> detections (`frigate`) and review items (`frigate_reviews`), verdicts -> MQTT and Home Assistant
(`verdict_publisher`) and back to Frigate's events (`frigate_writeback`). Shared pieces beside them:
`window_planning` (which windows get a run), `hold` (holding a tick until something changes) and `default_status`
(an optional integration's sensor runs by default only when the settings configure it)."""

from hsi_dagster.sensors.alerts import high_risk_alert_sensor, unassessed_fast_path_sensor
from hsi_dagster.sensors.batch_windows import batch_window_sensor
from hsi_dagster.sensors.evidence_watch import evidence_watch_sensor
from hsi_dagster.sensors.frigate import frigate_events_sensor
from hsi_dagster.sensors.frigate_reviews import frigate_reviews_sensor
from hsi_dagster.sensors.frigate_writeback import frigate_writeback_sensor
from hsi_dagster.sensors.inbox import InboxCursor, inbox_sensor
from hsi_dagster.sensors.verdict_publisher import verdict_publisher_sensor

__all__ = [
    "InboxCursor",
    "batch_window_sensor",
    "evidence_watch_sensor",
    "frigate_events_sensor",
    "frigate_reviews_sensor",
    "frigate_writeback_sensor",
    "high_risk_alert_sensor",
    "inbox_sensor",
    "unassessed_fast_path_sensor",
    "verdict_publisher_sensor",
]
