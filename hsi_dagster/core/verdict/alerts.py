"""Which assessments call for an alert, what the alert says, and whether its webhook post is due.

Pure: the rows come from `storage.alerts`, the post is made by `resources.alerts.AlertWebhookResource`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal
from urllib.parse import urlsplit

ALERT_LEVELS = ("high", "critical")
RISK = "risk"
FAST_PATH_UNASSESSED = "fast_path_unassessed"
PROMPT_TOO_LARGE = "prompt_too_large"  # also the risk_assessments status of such a batch

WebhookAction = Literal["post", "disabled", "cooldown"]


@dataclass(frozen=True)
class VisitRef:
    """The visit a verdict's batch belongs to (storage/visits.py), as the phone and Home Assistant show it."""

    visit_id: str
    cameras: tuple[str, ...]  # in the order the visit reached them
    level: str  # the visit's own level (its escalation, never a rewrite of a stored batch)
    reasons: tuple[str, ...] = ()

    @property
    def multi_camera(self) -> bool:
        return len(self.cameras) >= 2

    def payload(self) -> dict:
        return {
            "visit_id": self.visit_id,
            "cameras": list(self.cameras),
            "level": self.level,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class Alert:
    alert_id: str
    batch_id: str
    camera_id: str
    kind: str  # RISK | FAST_PATH_UNASSESSED
    risk_level: str | None
    risk_score: int | None
    summary: str | None
    visit: VisitRef | None = None

    def payload(self) -> dict:
        """The webhook's JSON body (with the visit when the batch is part of one across cameras)."""
        body: dict = {
            "alert_id": self.alert_id,
            "kind": self.kind,
            "batch_id": self.batch_id,
            "camera_id": self.camera_id,
            "risk_level": self.risk_level,
            "risk_score": self.risk_score,
            "summary": self.summary,
        }
        if self.visit is not None:
            body["visit"] = self.visit.payload()
        return body


def risk_alert(
    batch_id: str,
    camera_id: str,
    risk_level: str | None,
    risk_score: int | None,
    summary: str | None,
    visit: VisitRef | None = None,
    *,
    alerted: Sequence[tuple[str, str]] = (),
) -> Alert | None:
    """The alert a valid assessment calls for: only high and critical levels alert. A batch of a visit across
    several cameras alerts once per visit and level (`<visit_id>:risk:<level>`): the third camera of a visit already
    alerted high sends nothing new, an escalation to critical does. `alerted`: (alert id, level) of the evidence-only
    alerts already sent for the batch's detections or its visit; one at this level or above already said it."""
    if risk_level not in ALERT_LEVELS:
        return None
    if already_alerted(risk_level, alerted) is not None:
        return None
    if visit is not None and visit.multi_camera:
        alert_id = f"{visit.visit_id}:risk:{risk_level}"
        return Alert(alert_id, batch_id, camera_id, RISK, risk_level, risk_score, summary, visit)
    return Alert(f"{batch_id}:risk", batch_id, camera_id, RISK, risk_level, risk_score, summary, visit)


def already_alerted(risk_level: str, alerted: Sequence[tuple[str, str]]) -> str | None:
    """The id of an alert in `alerted` ((alert id, level)) at `risk_level` or above, None when there is none: one
    visit (or one set of detections) alerts once per level."""
    if risk_level not in ALERT_LEVELS:
        return None
    rank = ALERT_LEVELS.index(risk_level)
    return next(
        (alert_id for alert_id, level in alerted if level in ALERT_LEVELS and ALERT_LEVELS.index(level) >= rank),
        None,
    )


def fast_path_unassessed_alert(batch_id: str, camera_id: str, labels: Sequence[str]) -> Alert:
    """A fast-path batch (a confident person) the LLM could not assess: no level, no score, no LLM text."""
    return Alert(
        f"{batch_id}:unassessed",
        batch_id,
        camera_id,
        FAST_PATH_UNASSESSED,
        None,
        None,
        f"fast-path detection ({', '.join(labels)}) could not be assessed by the LLM",
    )


def prompt_too_large_alert(batch_id: str, camera_id: str, labels: Sequence[str], error: str | None) -> Alert:
    """A batch whose prompt could not fit its slot even at its floor (core/prompt/budget.py): never assessed, so it
    alerts like an unassessed fast-path batch, whatever its labels, and says which settings to change."""
    return Alert(
        f"{batch_id}:unassessed",
        batch_id,
        camera_id,
        PROMPT_TOO_LARGE,
        None,
        None,
        f"batch ({', '.join(labels)}) could not be assessed: its prompt does not fit one llama-server slot"
        + (f" ({error})" if error else ""),
    )


def webhook_action(
    url: str | None, last_attempt: datetime | None, now: datetime, cooldown_seconds: float
) -> WebhookAction:
    """Post unless the webhook is off or the camera's last attempt (sent or failed) is within the cooldown."""
    if not url:
        return "disabled"
    if last_attempt is not None and now - last_attempt < timedelta(seconds=cooldown_seconds):
        return "cooldown"
    return "post"


def redacted_url(url: str) -> str:
    """What may be shown or stored of a webhook URL: its scheme and host. Credentials, path and query are cut
    (`https://ntfy.example/…`): a webhook URL often carries its token there (ntfy topics, Slack, Home Assistant)."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:  # e.g. 'http://[::1' or a port that is not a number
        return "<unparseable URL>"
    if not parts.scheme or not host:
        return "<unparseable URL>"
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    hidden = parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password
    return f"{parts.scheme}://{netloc}{'/…' if hidden else ''}"
