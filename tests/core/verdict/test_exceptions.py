"""Household exceptions: a pattern corrected as harmless often enough, never for the weapon/violence/forcing rules,
never for an unknown person at an entry zone at night; they expire and a removal resets the count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.context.context_models import EnrichedContext
from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.verdict.evidence import EvidenceRules, evidence_floor, unknown_person_at_entry_at_night
from hsi_dagster.core.verdict.exceptions import (
    EXEMPTIBLE_RULES,
    MAX_EXCEPTIONS_PER_CAMERA,
    NEVER_EXEMPT_RULES,
    ExceptionPolicy,
    HarmlessLabel,
    HouseholdException,
    batch_pattern,
    derive_exceptions,
    exempts,
    harmless_label,
)

PROFILE = CameraProfile(
    camera_id="drive", timezone="UTC", zones=["driveway", "street", "door"], entry_zones=["door"], private_zones=[]
)
RULES = EvidenceRules()
POLICY = ExceptionPolicy(min_corrections=3, days=30)
T0 = datetime(2026, 3, 1, 23, 30, tzinfo=UTC)  # 23:30: the neighbour parks


def context(
    batch_id: str,
    start: datetime,
    *,
    label: str = "car",
    zone: str = "driveway",
    profile: CameraProfile | None = PROFILE,
    **enrichment: Any,
) -> EnrichedContext:
    detections = [
        {
            "detection_id": f"{batch_id}-{n}",
            "ts": (start + timedelta(seconds=5 * n)).isoformat(),
            "label": label,
            "confidence": 0.9,
            "zone": zone,
            "track_id": f"{batch_id}-t",
            "enrichment": dict(enrichment),
        }
        for n in range(3)
    ]
    batch = {
        "batch_id": batch_id,
        "camera_id": "drive",
        "started_at": detections[0]["ts"],
        "last_ts": detections[-1]["ts"],
    }
    return build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2, camera_profile=profile)


def label_of(batch_id: str, start: datetime, received: datetime, **kwargs: Any) -> HarmlessLabel:
    ctx = context(batch_id, start, **kwargs)
    return harmless_label(batch_id, ctx, received, unknown_person_at_entry_at_night(ctx, PROFILE, RULES))


def nights(n: int, **kwargs: Any) -> list[HarmlessLabel]:
    return [label_of(f"b{i}", T0 + timedelta(days=i), T0 + timedelta(days=i, hours=1), **kwargs) for i in range(n)]


def test_the_pattern_is_camera_labels_zones_hour_band_and_recognised_identities() -> None:
    pattern = batch_pattern(context("b", T0, reid={"identity": "resident:alex", "known": True}))
    assert (pattern.camera_id, pattern.labels, pattern.zones, pattern.hour_band) == (
        "drive",
        ("car",),
        ("driveway",),
        22,
    )
    assert pattern.identities == ("resident:alex",)
    # a re-identification that says "not known" is no identity
    assert batch_pattern(context("b", T0, reid={"identity": "unknown", "known": False})).identities == ()


def test_three_nights_corrected_harmless_make_an_exception_two_do_not() -> None:
    assert derive_exceptions(nights(2), {}, T0 + timedelta(days=3), POLICY) == ([], [])
    (exception,), refused = derive_exceptions(nights(3), {}, T0 + timedelta(days=3), POLICY)
    assert refused == [] and exception.corrections == 3
    assert exception.explain().startswith("the household marked 3 similar events harmless (drive: car on driveway")
    # the same batch corrected twice counts once
    again = nights(2) + [label_of("b1", T0, T0 + timedelta(days=5))]
    assert derive_exceptions(again, {}, T0 + timedelta(days=6), POLICY) == ([], [])


def test_another_hour_band_zone_or_label_is_another_pattern() -> None:
    mixed = nights(2) + [label_of("x", T0 + timedelta(hours=3), T0 + timedelta(days=3))]  # 02:30: another band
    mixed.append(label_of("y", T0, T0, zone="street"))
    mixed.append(label_of("z", T0, T0, label="truck"))
    assert derive_exceptions(mixed, {}, T0 + timedelta(days=3), POLICY) == ([], [])


def test_an_exception_expires_and_a_removal_resets_the_count() -> None:
    labels = nights(3)
    last = labels[-1].received_at
    assert derive_exceptions(labels, {}, last + timedelta(days=29), POLICY)[0]
    assert derive_exceptions(labels, {}, last + timedelta(days=30), POLICY)[0] == []
    key = labels[0].pattern.key
    assert derive_exceptions(labels, {key: last}, last + timedelta(days=1), POLICY)[0] == []
    later = [label_of(f"n{i}", T0 + timedelta(days=10 + i), last + timedelta(days=1 + i)) for i in range(3)]
    (exception,), _ = derive_exceptions(labels + later, {key: last}, last + timedelta(days=4), POLICY)
    assert exception.corrections == 3  # only the corrections after the removal


def test_an_unknown_person_at_an_entry_zone_at_night_never_becomes_an_exception() -> None:
    people = nights(4, label="person", zone="door")
    exceptions, (refused,) = derive_exceptions(people, {}, T0 + timedelta(days=4), POLICY)
    assert (
        exceptions == [] and refused.corrections == 4 and "unknown person at an entry zone at night" in refused.reason
    )
    # unless a recogniser named the person
    resident = nights(3, label="person", zone="door", reid={"identity": "resident:sam", "known": True})
    (exception,), refused_none = derive_exceptions(resident, {}, T0 + timedelta(days=3), POLICY)
    assert refused_none == [] and exception.pattern.identities == ("resident:sam",)
    # an unknown person by day, or off the entry zones, may be an exception
    day = [
        label_of(
            f"d{i}", T0 - timedelta(hours=10) + timedelta(days=i), T0 + timedelta(days=i), label="person", zone="door"
        )
        for i in range(3)
    ]
    assert len(derive_exceptions(day, {}, T0 + timedelta(days=3), POLICY)[0]) == 1


def test_only_the_presence_rules_can_ever_be_exempt() -> None:
    (exception,), _ = derive_exceptions(nights(3), {}, T0 + timedelta(days=3), POLICY)
    pattern, now = exception.pattern, T0 + timedelta(days=3)
    for rule in EXEMPTIBLE_RULES:
        assert exempts(exception, pattern, rule, now)
    for rule in NEVER_EXEMPT_RULES:
        assert not exempts(exception, pattern, rule, now)
    assert not exempts(exception, pattern, "a rule added later", now)
    other = batch_pattern(context("o", T0, zone="street"))
    assert not exempts(exception, other, "vehicle or object at night", now)
    assert not exempts(exception, pattern, "vehicle or object at night", exception.expires_at)


def test_a_camera_holds_a_bounded_number_of_exceptions() -> None:
    labels = []
    for p in range(MAX_EXCEPTIONS_PER_CAMERA + 5):
        labels += [
            label_of(f"p{p}-{i}", T0 + timedelta(days=i), T0 + timedelta(days=i), label=f"thing{p}") for i in range(3)
        ]
    exceptions, _ = derive_exceptions(labels, {}, T0 + timedelta(days=3), POLICY)
    assert len(exceptions) == MAX_EXCEPTIONS_PER_CAMERA


WATCHED = PROFILE.model_copy(update={"private_zones": ["driveway"]})  # the driveway is watched: a car there at night


def floor_with(ctx: EnrichedContext, exceptions, at: datetime, profile: CameraProfile | None = WATCHED):
    return evidence_floor(ctx, profile, None, RULES, exceptions, at)


def test_the_floor_lifts_the_presence_rules_of_an_exception_and_says_so() -> None:
    exceptions, _ = derive_exceptions(nights(3), {}, T0 + timedelta(days=3), POLICY)
    car = context("next", T0 + timedelta(days=4))
    assert floor_with(car, [], T0 + timedelta(days=4)).score == 45  # vehicle at night, without the exception
    floor = floor_with(car, exceptions, T0 + timedelta(days=4))
    assert floor.score == 0 and floor.level == "low"
    (reason,) = floor.reasons
    assert reason.startswith("vehicle or object at night:") and " -> lifted: the household marked 3 similar" in reason
    assert f"exception {exceptions[0].pattern.key}, expires {exceptions[0].expires_at:%Y-%m-%d}" in reason
    # forcing on the same pattern stands; only the presence rule is lifted
    prying = context("pry", T0 + timedelta(days=4), action={"label": "prying", "score": 0.9})
    floor = floor_with(prying, exceptions, T0 + timedelta(days=4))
    assert floor.score == 75 and floor.reasons[0].startswith("forcing:") and "lifted" in floor.reasons[-1]


def test_an_expired_or_other_pattern_exception_changes_nothing() -> None:
    exceptions, _ = derive_exceptions(nights(3), {}, T0 + timedelta(days=3), POLICY)
    car = context("next", T0 + timedelta(days=4))
    assert floor_with(car, exceptions, exceptions[0].expires_at).score == 45
    street = context("street", T0 + timedelta(days=4), zone="street")
    assert floor_with(street, exceptions, T0 + timedelta(days=4)) == floor_with(street, [], T0 + timedelta(days=4))


def test_the_floor_never_lifts_an_unknown_person_at_an_entry_zone_at_night() -> None:
    # an exception for that pattern cannot be derived; made by hand, the floor still refuses it
    person = context("man", T0 + timedelta(days=4), label="person", zone="door")
    forged = HouseholdException(batch_pattern(person), 9, T0, T0, T0 + timedelta(days=30))
    floor = floor_with(person, [forged], T0 + timedelta(days=4))
    assert floor.score == 70 and floor.reasons[0].startswith("person at night:")
    assert "not applied: a person not known" in floor.reasons[-1]
    # without a profile the entry role is guessed from the zone's name (front_door): the same refusal
    guessed = context("man2", T0 + timedelta(days=4), label="person", zone="front_door", profile=None)
    assert unknown_person_at_entry_at_night(guessed, None, RULES)
    by_hand = HouseholdException(batch_pattern(guessed), 9, T0, T0, T0 + timedelta(days=30))
    assert floor_with(guessed, [by_hand], T0 + timedelta(days=4), profile=None).score == 70
