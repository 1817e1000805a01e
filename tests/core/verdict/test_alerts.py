"""The pure alert rules: which levels alert, what a fast-path alert says, and when the webhook is due."""

from datetime import UTC, datetime, timedelta

import pytest

from hsi_dagster.core.verdict.alerts import (
    FAST_PATH_UNASSESSED,
    RISK,
    VisitRef,
    fast_path_unassessed_alert,
    risk_alert,
    webhook_action,
)

NOW = datetime(2026, 12, 1, 2, 30, tzinfo=UTC)


@pytest.mark.parametrize("level", ["low", "medium", None, "HIGH", ""])
def test_levels_below_high_do_not_alert(level) -> None:
    assert risk_alert("b1", "porch", level, 50, "text") is None


@pytest.mark.parametrize("level", ["high", "critical"])
def test_high_and_critical_alert_with_the_assessment_text(level: str) -> None:
    alert = risk_alert("b1", "porch", level, 88, "person at the door")
    assert alert is not None
    assert alert.payload() == {
        "alert_id": "b1:risk",
        "kind": RISK,
        "batch_id": "b1",
        "camera_id": "porch",
        "risk_level": level,
        "risk_score": 88,
        "summary": "person at the door",
    }


def test_fast_path_alert_has_no_level_score_or_llm_text() -> None:
    alert = fast_path_unassessed_alert("fp1", "porch", ["person", "dog"])
    assert (alert.alert_id, alert.kind, alert.risk_level, alert.risk_score) == (
        "fp1:unassessed",
        FAST_PATH_UNASSESSED,
        None,
        None,
    )
    assert alert.summary == "fast-path detection (person, dog) could not be assessed by the LLM"


@pytest.mark.parametrize("url", [None, ""])
def test_no_url_means_disabled(url) -> None:
    assert webhook_action(url, None, NOW, 600) == "disabled"
    assert webhook_action(url, NOW - timedelta(seconds=1), NOW, 600) == "disabled"


@pytest.mark.parametrize(
    ("since_last", "cooldown", "action"),
    [
        (None, 600, "post"),  # never tried
        (timedelta(seconds=1), 600, "cooldown"),
        (timedelta(seconds=599.999), 600, "cooldown"),
        (timedelta(seconds=600), 600, "post"),  # the cooldown is over at exactly its length
        (timedelta(0), 0, "post"),  # cooldown 0: every alert posts
    ],
)
def test_cooldown_runs_from_the_last_attempt(since_last, cooldown: float, action: str) -> None:
    last = None if since_last is None else NOW - since_last
    assert webhook_action("http://127.0.0.1:9/hook", last, NOW, cooldown) == action


def test_a_visit_across_cameras_alerts_once_per_level_with_the_visit_in_the_payload() -> None:
    visit = VisitRef("visit:b1", ("front_door", "driveway", "side_gate"), "high", ("third camera in 6 minutes",))
    third = risk_alert("b3", "side_gate", "high", 70, None, visit=visit)
    fourth = risk_alert("b4", "front_door", "high", 72, None, visit=visit)
    worse = risk_alert("b5", "side_gate", "critical", 90, None, visit=visit)
    assert third is not None and fourth is not None and worse is not None
    assert third.alert_id == fourth.alert_id == "visit:b1:risk:high" and worse.alert_id == "visit:b1:risk:critical"
    assert third.payload()["visit"] == {
        "visit_id": "visit:b1",
        "cameras": ["front_door", "driveway", "side_gate"],
        "level": "high",
        "reasons": ["third camera in 6 minutes"],
    }
    alone = risk_alert("b9", "porch", "high", 70, None, visit=VisitRef("visit:b9", ("porch",), "low"))
    assert alone is not None and alone.alert_id == "b9:risk"  # one camera: the batch's own alert, as before
