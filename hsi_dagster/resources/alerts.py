"""Where alerts go: an `alerts` row each, and a webhook POST (off without a URL) with a per-camera cooldown.

A webhook that fails never fails the caller (a sensor): the outcome is stored in `alerts.webhook_status`.
The URL is a secret (ALERT_WEBHOOK_URL, passed as `dg.EnvVar`): it often carries a token, so statuses and logs name
it by `core.verdict.alerts.redacted_url` only (scheme and host).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dagster as dg
import duckdb
import httpx
from pydantic import Field

from hsi_dagster.core.verdict.alerts import Alert, redacted_url, webhook_action
from hsi_dagster.settings import HsiSettings
from hsi_dagster.storage.alerts import alert_stored, last_webhook_attempt, save_alert


class AlertWebhookResource(dg.ConfigurableResource):
    """ALERT_WEBHOOK_URL and ALERT_COOLDOWN_SECONDS: one post per camera per cooldown, the rest stored only."""

    url: str | None = Field(
        default=None,
        description="Webhook that receives each alert as JSON; None = off. A secret: dg.EnvVar('ALERT_WEBHOOK_URL').",
    )
    cooldown_seconds: float = Field(
        default=600.0, ge=0, description="After a post (sent or failed), the camera's next alerts are only stored."
    )
    timeout_seconds: float = Field(default=5.0, gt=0, description="Per post; a slow webhook must not stall a sensor.")

    @classmethod
    def from_settings(cls, settings: HsiSettings, url: Any) -> AlertWebhookResource:
        """ALERT_COOLDOWN_SECONDS; `url` is dg.EnvVar("ALERT_WEBHOOK_URL") in the definitions (None when unset)."""
        return cls(url=url, cooldown_seconds=settings.ALERT_COOLDOWN_SECONDS)

    def post(self, payload: dict) -> str:
        """POST the alert; returns 'sent', or 'failed: <reason>' naming the endpoint by its redacted form (the
        status is stored). Never raises."""
        if not self.url:
            return "disabled"
        try:
            response = httpx.post(self.url, json=payload, timeout=self.timeout_seconds)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL is not an HTTPError (e.g. 'http://[::1')
            return f"failed: {redacted_url(self.url)}: {type(exc).__name__}"  # the type only: messages hold the URL
        if response.status_code >= 300:
            return f"failed: {redacted_url(self.url)}: HTTP {response.status_code}"
        return "sent"

    def raise_alert(self, conn: duckdb.DuckDBPyConnection, alert: Alert, *, now: datetime | None = None) -> str | None:
        """Store the alert once (keyed by alert_id) and post it unless the webhook is off or the camera in cooldown.

        Returns the stored webhook status (sent, failed: ..., cooldown, disabled), or None when this alert was
        already stored (a sensor re-evaluating a tick).
        """
        now = now or datetime.now(UTC)
        if alert_stored(conn, alert.alert_id):
            return None
        action = webhook_action(self.url, last_webhook_attempt(conn, alert.camera_id), now, self.cooldown_seconds)
        status = self.post(alert.payload()) if action == "post" else action
        save_alert(conn, alert, status, now)
        return status
