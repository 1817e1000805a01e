"""Alerts before the LLM: detections whose evidence alone reaches high or critical alert at once, marked evidence-only.

Pure: the detections come from `storage.evidence_alerts.evidence_candidates`, the alerts are stored and posted by the
inbox sensor (sensors/inbox.py); the batch's verdict follows later and may only raise them (core/verdict/final.py).

- Who: one alert per camera + track + cooldown slot. Each track (or, for untracked detections, each cooldown slot of
  the camera) is judged on the detections seen so far of that track, plus the camera's non-person detections within
  `NEARBY_SECONDS` of it (a knife or a crowbar is usually its own detector track beside the person's). A non-person
  track beside a person track is judged with the person (one alert for the incident, keyed by the person's track).
- What: core.verdict.evidence.evidence_floor over a context built with core.context.enrichment.build_context, as the
  batch's floor is (quality "full": whatever enrichment arrived inline counts). An alert when the floor is high or
  critical. The camera's household exceptions in force (core/verdict/exceptions.py) are respected the floor's way:
  a group of exactly an exception's pattern has its presence rules lifted (a person at night on the garden the
  household marked harmless does not alert every night); the weapon, violence, forcing, probing and tool rules are
  never lifted, nor an unknown person at an entry zone at night without a recognised identity.
- Key: `<camera>:<track or "-">:<slot>`, slot = the track's first detection time (an untracked detection's own time)
  divided by the cooldown: the same detections give the same key, so a tick that dies midway and runs again, or
  the next tick seeing more of the same track, finds the key stored and sends nothing twice.
- Visit: the alert's detections make a sighting (`evidence:<key>`, core/visits/sighting.py) that the sensor links
  into the site's visit (storage/visits.py); the alert then names its visit (`visit`), and the batch that later holds
  the same detections takes the sighting's place in that visit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.verdict.alerts import VisitRef
from hsi_dagster.core.verdict.evidence import ALERT_LEVELS, EvidenceRules, evidence_floor
from hsi_dagster.core.verdict.exceptions import HouseholdException
from hsi_dagster.core.visits.sighting import Sighting, sighting_of

EVIDENCE_ONLY = "evidence_only"
NEARBY_SECONDS = 30.0
PERSON = "person"
CONTEXT_QUALITY = "full"


@dataclass(frozen=True)
class EvidenceAlert:
    alert_key: str
    camera_id: str
    track_id: str | None
    detection_id: str  # the newest detection judged when the alert was decided
    risk_score: int
    risk_level: str
    reasons: tuple[str, ...]
    detected_at: datetime  # that detection's ts
    sighting: Sighting | None = field(default=None, compare=False)  # what it adds to a visit (None: no one)
    visit: VisitRef | None = None  # the visit it was linked into (set by the sensor)

    def payload(self) -> dict[str, Any]:
        """The webhook's JSON body: the same keys as a batch alert (core.verdict.alerts.Alert.payload) plus the
        reasons."""
        return {
            "alert_id": f"evidence:{self.alert_key}",
            "kind": EVIDENCE_ONLY,
            "batch_id": None,
            "camera_id": self.camera_id,
            "track_id": self.track_id,
            "risk_level": self.risk_level,
            "risk_score": self.risk_score,
            "summary": f"Evidence alone ({self.risk_level}), before any LLM verdict: {self.reasons[0]}"
            if self.reasons
            else f"Evidence alone ({self.risk_level})",
            "reasons": [*self.reasons, *(self.visit.reasons if self.visit is not None else ())],
            "detected_at": self.detected_at.isoformat(),
            **({"visit": self.visit.payload()} if self.visit is not None else {}),
        }


def cooldown_slot(moment: datetime, cooldown_seconds: float) -> int:
    return int(moment.timestamp() // max(cooldown_seconds, 1.0))


def alert_key(camera_id: str, track_id: str | None, first_ts: datetime, cooldown_seconds: float) -> str:
    return f"{camera_id}:{track_id or '-'}:{cooldown_slot(first_ts, cooldown_seconds)}"


@dataclass
class _Group:
    camera_id: str
    track_id: str | None
    detections: list[Mapping[str, Any]]

    @property
    def first(self) -> datetime:
        return min(d["ts"] for d in self.detections)

    @property
    def last(self) -> datetime:
        return max(d["ts"] for d in self.detections)

    @property
    def has_person(self) -> bool:
        return any(d.get("label") == PERSON for d in self.detections)


def _groups(camera_id: str, detections: Sequence[Mapping[str, Any]], cooldown_seconds: float) -> list[_Group]:
    by_key: dict[tuple[str | None, int], _Group] = {}
    for d in detections:
        track = d.get("track_id") or None
        slot = 0 if track else cooldown_slot(d["ts"], cooldown_seconds)
        by_key.setdefault((track, slot), _Group(camera_id, track, [])).detections.append(d)
    return list(by_key.values())


def _judged_with_a_person(group: _Group, groups: Sequence[_Group]) -> bool:
    """A non-person track near a person track: the person's alert covers it."""
    if group.has_person:
        return False
    near = timedelta(seconds=NEARBY_SECONDS)
    return any(
        other is not group
        and other.has_person
        and other.first - near <= group.last
        and group.first <= other.last + near
        for other in groups
    )


def _context_detections(group: _Group, camera_detections: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    near = timedelta(seconds=NEARBY_SECONDS)
    mine = {d["detection_id"] for d in group.detections}
    nearby = [
        d
        for d in camera_detections
        if d["detection_id"] not in mine
        and d.get("label") != PERSON
        and group.first - near <= d["ts"] <= group.last + near
    ]
    return [*group.detections, *nearby]


def evidence_alerts(
    detections: Iterable[Mapping[str, Any]],
    new_ids: Iterable[str],
    profiles: Mapping[str, CameraProfile],
    *,
    cooldown_seconds: float,
    rules: EvidenceRules | None = None,
    exceptions: Mapping[str, Sequence[HouseholdException]] | None = None,
    at: datetime | None = None,
) -> list[EvidenceAlert]:
    """The alerts the detections call for, judging only groups holding one of `new_ids` (the others were judged
    when their detections arrived). `detections`: contract rows with `ts` as aware datetimes, `enrichment` parsed.
    `exceptions`: per camera, the household exceptions in force at `at` (the moment of judgement)."""
    fresh = set(new_ids)
    by_camera: dict[str, list[Mapping[str, Any]]] = {}
    for d in detections:
        by_camera.setdefault(str(d["camera_id"]), []).append(d)
    alerts = []
    for camera_id, camera_detections in sorted(by_camera.items()):
        groups = _groups(camera_id, camera_detections, cooldown_seconds)
        for group in groups:
            if not fresh & {d["detection_id"] for d in group.detections} or _judged_with_a_person(group, groups):
                continue
            alert = _judge(
                group,
                _context_detections(group, camera_detections),
                profiles,
                cooldown_seconds,
                rules,
                (exceptions or {}).get(camera_id, ()),
                at,
            )
            if alert is not None:
                alerts.append(alert)
    return alerts


def _judge(
    group: _Group,
    context_detections: Sequence[Mapping[str, Any]],
    profiles: Mapping[str, CameraProfile],
    cooldown_seconds: float,
    rules: EvidenceRules | None,
    exceptions: Sequence[HouseholdException] = (),
    at: datetime | None = None,
) -> EvidenceAlert | None:
    key = alert_key(group.camera_id, group.track_id, group.first, cooldown_seconds)
    newest = max(group.detections, key=lambda d: (d["ts"], d["detection_id"]))
    first = min(d["ts"] for d in context_detections)
    last = max(d["ts"] for d in context_detections)
    pseudo_batch = {
        "batch_id": f"evidence:{key}",
        "camera_id": group.camera_id,
        "started_at": first,
        "last_ts": last,
        "close_reason": "evidence",
        "detection_count": len(context_detections),
    }
    profile = profiles.get(group.camera_id)
    context = build_context(
        pseudo_batch,
        context_detections,
        quality_level=CONTEXT_QUALITY,
        clip_noise_threshold=0.0,
        camera_profile=profile,
    )
    floor = evidence_floor(context, profile, None, rules, exceptions, at)
    if floor.level not in ALERT_LEVELS:
        return None
    presence = rules or EvidenceRules()
    sighting = sighting_of(
        context, profile, known_plates=presence.known_plates, min_confidence=presence.presence_min_confidence
    )
    return EvidenceAlert(
        alert_key=key,
        camera_id=group.camera_id,
        track_id=group.track_id,
        detection_id=str(newest["detection_id"]),
        risk_score=floor.score,
        risk_level=floor.level,
        reasons=floor.reasons,
        detected_at=newest["ts"],
        sighting=sighting,
    )
