"""A batch's sighting (core/visits/sighting.py), from contexts built by the real build_context: who is known, which
zones a stranger reached, the camera's local time; animals and noise make no sighting."""

from __future__ import annotations

from datetime import datetime, timedelta

from hsi_dagster.core.context.camera_profiles import CameraProfile, ResidentVehicle
from hsi_dagster.core.context.enrichment import build_context
from hsi_dagster.core.visits.sighting import Sighting, sighting_of, sightings_from_json, sightings_to_json
from tests.core.visits.helpers import LONDON_NIGHT, STRANGER, context_of, resident

PORCH = CameraProfile(
    camera_id="front_door",
    timezone="Europe/Paris",
    zones=["porch", "pavement"],
    entry_zones=["porch"],
    resident_vehicles=[ResidentVehicle(description="hatchback", plate="AB-123-CD")],
)


def test_a_stranger_on_the_porch_is_an_unknown_sighting_at_the_cameras_local_time():
    context = context_of("front_door", LONDON_NIGHT, zone="porch", profile=PORCH, enrichment=STRANGER, frames=7)
    seen = sighting_of(context, PORCH)
    assert seen is not None
    assert (seen.unknown_people, seen.known_people, seen.entry_zones) == (1, 0, ("porch",))
    assert (seen.local_time, seen.local_hour, seen.timezone) == ("03:30", 3, "Europe/Paris")
    assert seen.identities == () and seen.known_identities == ()  # "unknown" names nobody: it links nothing
    assert seen.longest_still_s == 30.0 and seen.still_zone == "porch"


def test_a_resident_recognised_is_known_and_reaches_no_zone_as_a_stranger():
    context = context_of("front_door", LONDON_NIGHT, zone="porch", profile=PORCH, enrichment=resident("alex"))
    seen = sighting_of(context, PORCH)
    assert seen is not None
    assert (seen.unknown_people, seen.known_people) == (0, 1)
    assert seen.known_identities == ("resident:alex",) and seen.entry_zones == ()


def test_a_household_plate_is_the_household():
    plate = {"vehicle": {"type": "car", "plate": "ab 123 cd"}}
    context = context_of("front_door", LONDON_NIGHT, label="car", profile=PORCH, enrichment=plate)
    seen = sighting_of(context, PORCH)
    assert seen is not None
    assert seen.vehicles == 1 and seen.unknown_people == 0
    assert seen.plates == ("AB123CD",) and seen.known_identities == ("plate:AB123CD",)


def test_a_fox_or_a_low_confidence_person_makes_no_sighting():
    assert sighting_of(context_of("garden", LONDON_NIGHT, label="fox"), None) is None
    assert sighting_of(context_of("garden", LONDON_NIGHT, confidence=0.3), None) is None


def test_a_sighting_round_trips_through_its_stored_json():
    seen = sighting_of(context_of("front_door", LONDON_NIGHT, enrichment=STRANGER), None)
    assert seen is not None
    again = sightings_from_json(sightings_to_json([seen]))
    assert again == (seen,)
    assert isinstance(again[0], Sighting) and again[0].end - again[0].start == timedelta(seconds=15)
    assert again[0].start.tzinfo is not None and again[0].start == datetime.fromisoformat(seen.start.isoformat())


def test_a_street_party_of_a_hundred_tracks_is_one_bounded_sighting():
    detections = [
        {
            "detection_id": f"p{n}",
            "ts": (LONDON_NIGHT + timedelta(seconds=n % 60)).isoformat(),
            "label": "person",
            "confidence": 0.9,
            "zone": "pavement",
            "track_id": f"t{n}",
            "enrichment": {"reid": {"identity": f"guest-{n}", "known": False}},
        }
        for n in range(100)
    ]
    detections.sort(key=lambda d: d["ts"])
    batch = {
        "batch_id": "party",
        "camera_id": "street",
        "started_at": detections[0]["ts"],
        "last_ts": detections[-1]["ts"],
    }
    seen = sighting_of(build_context(batch, detections, quality_level="full", clip_noise_threshold=0.2), None)
    assert seen is not None and seen.unknown_people == 100
    assert len(seen.identities) == 16 and seen.identities[0] == "guest-0"


def test_a_stranger_walking_across_the_view_is_passing_one_who_stops_is_not():
    """The box centre moving half the frame is a walk past; a few hundredths is someone standing to look. A walker
    on an entry zone is no passer-by (they came to the door)."""
    walker = sighting_of(context_of("front_door", LONDON_NIGHT, walk=0.5), None)
    looker = sighting_of(context_of("front_door", LONDON_NIGHT, walk=0.02), None)
    assert walker is not None and walker.passing and walker.longest_still_s == 0.0
    assert looker is not None and not looker.passing and looker.longest_still_s == 15.0
    profile = CameraProfile(camera_id="front_door", zones=["porch"], entry_zones=["porch"])
    at_door = sighting_of(context_of("front_door", LONDON_NIGHT, zone="porch", walk=0.5, profile=profile), profile)
    assert at_door is not None and not at_door.passing and at_door.entry_zones == ("porch",)
