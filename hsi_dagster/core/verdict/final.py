"""The stored verdict of a batch: the model's score, raised to the evidence floor (core/verdict/evidence.py), never
lowered, and taken above the floor's level only as far as the answering model's trust allows (core/verdict/trust.py).

Used by the `risk_assessments` asset AND the evaluation engine, so `hsi eval` measures what production stores.

- score = max(model score, floor score), capped at the top of the band `trust` levels above the floor's level;
  the level is the band of that score (core.prompt.risk_schema.level_for_score).
- Why a cap at all: a small model's score is noise in both directions (SmolLM2 gave 8 or 93 for the same scene, and 93
  for a caption that tries to talk it into a verdict), and camera text must not push a verdict further than the
  model has earned. Why not a fixed cap of 0 (the old MODEL_RAISE_LEVELS): everything the hand-written rules do not
  cover then fails quiet, a crowbar at the front door stored "low". So the cap is the trust MEASURED for the model
  that answered (MODEL_TRUST, `auto` by default), and a verdict the model wanted higher says so (`untrusted_note`).
- `decided_by` is "model" when the model's score stands (it reached or passed the floor, within the trust), "floor"
  when the evidence decided: the floor raised it, the trust held it, or there is no usable model output at all.
- No usable model output (invalid after the one repair): when the floor alone reaches `FLOOR_STANDS_ALONE` (medium,
  30) the floor's verdict is stored (status `floor_only`) and alerts like any verdict: a household wants the
  masked person at the back door at 3 am on its phone even when the model answered garbage. Below that the batch
  stays `invalid_output` (the floor's figures are still kept on the row): "no rule fired" is not a verdict. A reply
  without a usable level never raises anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hsi_dagster.core.prompt.risk_schema import LEVEL_BANDS, level_for_score
from hsi_dagster.core.verdict.evidence import Floor
from hsi_dagster.core.verdict.trust import CONFIGURED, Trust, check_trust, model_level, untrusted_note

MODEL, FLOOR = "model", "floor"
OK, FLOOR_ONLY, INVALID_OUTPUT = "ok", "floor_only", "invalid_output"
FLOOR_STANDS_ALONE = next(low for level, low, _ in LEVEL_BANDS if level == "medium")
VERDICT_STATUSES = (OK, FLOOR_ONLY)  # statuses whose row carries a verdict (alerts, reports, MQTT read these)


@dataclass(frozen=True)
class Verdict:
    score: int
    level: str
    model_score: int | None  # None: the model gave no usable output
    floor_score: int
    floor_reasons: tuple[str, ...]
    decided_by: str  # MODEL | FLOOR
    floor_ignored: tuple[str, ...] = ()  # malformed enrichment the floor ignored (each names the detection, field)
    trust: Trust = Trust(0, CONFIGURED, "trust 0")  # how far above the floor's level the model could take it

    @property
    def model_level(self) -> str | None:
        """The level of the model's own verdict score (None: no usable output)."""
        return model_level(self.model_score)

    @property
    def note(self) -> str | None:
        """ "model said critical; not trusted for this model: measured trust 0" when the model wanted more than is
        stored (None otherwise): shown wherever the verdict is, never silent."""
        return untrusted_note(self.model_level, self.level if self.stands else None, self.trust.reason)

    @property
    def status(self) -> str:
        """ok (the model answered), floor_only (it did not, but the evidence alone is a verdict), invalid_output."""
        if self.model_score is not None:
            return OK
        return FLOOR_ONLY if self.floor_score >= FLOOR_STANDS_ALONE else INVALID_OUTPUT

    @property
    def stands(self) -> bool:
        """Whether there is a verdict to store, alert on and report."""
        return self.status in VERDICT_STATUSES

    def columns(self) -> dict:
        """The risk_assessments columns this verdict decides (risk_score and risk_level only when it stands)."""
        row: dict = {
            "model_score": self.model_score,
            "floor_score": self.floor_score,
            "floor_reasons": list(self.floor_reasons),
            "floor_ignored": list(self.floor_ignored),
            "decided_by": self.decided_by,
            "model_level": self.model_level,
            "model_trust": self.trust.value,
            "trust_source": self.trust.source,
            "trust_reason": self.trust.reason,
            "model_fingerprint": self.trust.fingerprint,
        }
        if self.stands:
            row |= {"risk_score": self.score, "risk_level": self.level}
        return row

    def explanation(self) -> str:
        """One line for a phone, the UI and `hsi report`: who decided and why."""
        if self.decided_by == MODEL:
            floor = f"evidence floor {self.floor_score}" if self.floor_score else "no evidence rule fired"
            return f"model {self.model_score} ({floor})"
        model = "no usable model output" if self.model_score is None else f"model said {self.model_score}"
        if self.model_score is not None and self.model_score > self.score:
            return (
                f"trust cap {self.score} ({model}; evidence floor {self.floor_score} + {self.trust.reason} allow no "
                "higher level)"
            )
        first = self.floor_reasons[0] if self.floor_reasons else "no rule fired"
        return f"evidence floor {self.floor_score} ({model}): {first}"


def model_ceiling(floor: Floor, trust: int) -> int:
    """The highest score the model may give: the top of the band `trust` levels above the floor's level."""
    levels = [level for level, _, _ in LEVEL_BANDS]
    top = min(levels.index(level_for_score(floor.score)) + trust, len(levels) - 1)
    return LEVEL_BANDS[top][2]


def final_verdict(model_score: int | None, floor: Floor, trust: Trust | int) -> Verdict:
    """max(model score, floor), capped `trust` levels above the floor: the floor never lowers a verdict, the model
    never takes it further than its trust allows; the level derives from the stored score. An int `trust` is a
    configured value (tests, sweeps)."""
    if model_score is not None and not (isinstance(model_score, int) and 0 <= model_score <= 100):
        raise ValueError(f"model_score must be an integer 0-100 or None, got {model_score!r}")
    if not isinstance(trust, Trust):
        trust = Trust(check_trust(trust, "trust"), CONFIGURED, f"trust {trust}")
    check_trust(trust.value, "trust")
    ceiling = model_ceiling(floor, trust.value)
    score = max(min(model_score or 0, ceiling), floor.score)
    decided_by = MODEL if model_score is not None and floor.score <= model_score <= ceiling else FLOOR
    return Verdict(
        score=score,
        level=level_for_score(score),
        model_score=model_score,
        floor_score=floor.score,
        floor_reasons=tuple(floor.reasons),
        decided_by=decided_by,
        floor_ignored=tuple(floor.ignored),
        trust=trust,
    )


def raised_by_evidence_alerts(floor: Floor, alerts: Sequence[Mapping[str, Any]]) -> Floor:
    """The batch's floor, raised to the evidence-only alerts already sent for its detections
    (storage.evidence_alerts.alerts_for_batch): the verdict that follows an alert may only raise it."""
    above = [alert for alert in alerts if int(alert["risk_score"]) > floor.score]
    if not above:
        return floor
    top = max(above, key=lambda alert: int(alert["risk_score"]))
    reasons = [
        f"evidence-only alert {alert['alert_key']} ({alert['risk_level']} {alert['risk_score']}): "
        + (alert["reasons"][0] if alert["reasons"] else "evidence rules")
        for alert in above
    ]
    score = int(top["risk_score"])
    return replace(floor, score=score, level=level_for_score(score), reasons=(*floor.reasons, *reasons))
