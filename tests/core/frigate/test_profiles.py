"""Camera profiles proposed from Frigate's config (core/frigate/profiles.py, issue 40 item 8): zone roles guessed
from the names, on the recorded night's config and on edge cases; every proposal reads back as a valid profile file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hsi_dagster.core.context.camera_profiles import parse_camera_profiles
from hsi_dagster.core.frigate.config import FrigateConfigError
from hsi_dagster.core.frigate.profiles import classify_zone, frigate_timezone, propose_profiles, render_profiles

RECORDED = Path(__file__).resolve().parents[2] / "data" / "frigate" / "frigate.yml"


def rendered(config: dict, timezone: str | None = None) -> str:
    return render_profiles(propose_profiles(config), origin="frigate.yml", timezone=timezone, timezone_source="test")


@pytest.mark.parametrize(
    ("zone", "role"),
    [
        ("front_door", "entry"),
        ("FrontDoor", "entry"),
        ("frontdoor", "entry"),
        ("door2", "entry"),
        ("garden_gate", "entry"),  # a gate is a way in, whatever ground it is on
        ("porches", "entry"),
        ("back-steps", "entry"),
        ("garage", "entry"),
        ("window_left", "entry"),
        ("backyard", "private"),
        ("back_garden", "private"),
        ("driveway", "private"),
        ("Patio", "private"),
        ("walkway", "private"),
        ("street", "public"),
        ("Sidewalk", "public"),
        ("pavement_north", "public"),
        ("footpath", "public"),  # the public one, not a garden path
        ("neighbours_garden", "public"),  # someone else's ground
        ("neighbor_door", "public"),
        ("street_driveway", None),  # both: the user decides
        ("outdoor_seating", None),  # "door" inside another word is not a door
        ("zone_1", None),
        ("vineyard", None),
    ],
)
def test_zone_roles_from_names(zone, role):
    assert classify_zone(zone).role == role


def test_the_recorded_nights_config():
    config = yaml.safe_load(RECORDED.read_text(encoding="utf-8"))
    proposals = {p.camera_id: p for p in propose_profiles(config)}
    assert list(proposals) == ["front_door", "driveway", "backyard"]
    assert proposals["front_door"].role_zones("entry") == ["porch"]
    assert proposals["front_door"].role_zones("private") == ["walkway"]
    assert proposals["driveway"].role_zones("private") == ["driveway"]
    assert proposals["driveway"].role_zones("public") == ["street"]
    assert proposals["backyard"].role_zones("private") == ["lawn", "shed"]
    text = rendered(config)
    assert "EDIT BEFORE USE" in text and "# public, not watched: street" in text
    profiles = parse_camera_profiles(text, source="proposal")
    assert profiles["front_door"].zones == ["walkway", "porch"] and profiles["front_door"].entry_zones == ["porch"]
    assert profiles["front_door"].entry_point and not profiles["driveway"].entry_point
    assert profiles["driveway"].private_zones == ["driveway"] and profiles["driveway"].entry_zones == []
    assert profiles["backyard"].timezone == "UTC" and "EDIT: your IANA time zone" in text


def test_edge_cases_no_zones_unknown_names_and_yaml_words_read_back():
    config = {
        "ui": {"timezone": "Europe/London"},
        "cameras": {
            "bare": {"enabled": False},  # no zones at all
            "odd": {"zones": {"on": {}, "yes": {}, "1st": {}, "x" * 70: {}, "back_door": {}}},
            "nothing": {"zones": {"zone_a": {"coordinates": "0,0,1,1"}}},  # a zone matching nothing
            "bad camera name!": {"zones": {"door": {}}},
        },
    }
    timezone = frigate_timezone(config)
    assert timezone == "Europe/London"
    text = rendered(config, timezone)
    profiles = parse_camera_profiles(text, source="proposal")
    assert set(profiles) == {"bare", "odd", "nothing"}  # a name a profile cannot hold is left out, and said so
    assert "left out: camera name(s) a profile cannot hold" in text and "bad camera name!" in text
    assert profiles["bare"].zones == [] and "Frigate has no zones here" in text
    assert "# disabled in Frigate's config" in text
    assert profiles["odd"].zones == ["on", "yes", "1st", "back_door"]  # YAML's booleans and numbers stay names
    assert profiles["odd"].entry_zones == ["back_door"] and "zone names over 64 characters left out" in text
    assert profiles["nothing"].zones == ["zone_a"]
    assert profiles["nothing"].entry_zones == [] and profiles["nothing"].private_zones == []
    assert "# not placed, not watched: zone_a (no known word)" in text
    assert profiles["nothing"].timezone == "Europe/London"


@pytest.mark.parametrize("config", [{}, {"cameras": {}}, {"cameras": []}, ["cameras"], None])
def test_a_config_without_cameras_is_an_error(config):
    with pytest.raises(FrigateConfigError, match="cameras"):
        propose_profiles(config)


def test_an_unknown_ui_timezone_is_not_used():
    assert frigate_timezone({"ui": {"timezone": "Mars/Olympus"}}) is None
    assert frigate_timezone({"ui": None}) is None


def test_the_proposal_gives_the_recorded_cameras_the_zone_rules():
    """A stranger on Frigate's `porch` at 02:30: high with the proposed profile, and already without one (the floor
    guesses the same roles from the names until a profile exists: core/verdict/watched_zones.py); real payload
    through the real mapping, context and floor. A passer-by on the `street` zone stays unraised either way."""
    from hsi_dagster.core.context.enrichment import build_context
    from hsi_dagster.core.verdict.evidence import evidence_floor
    from tests.core.verdict.test_frigate_evidence import detections, new, person

    config = yaml.safe_load(RECORDED.read_text(encoding="utf-8"))
    profiles = parse_camera_profiles(rendered(config, "Europe/London"), source="proposal")

    def floor(records, profile):
        batch = {"batch_id": "b", "camera_id": records[0]["camera_id"], "started_at": records[0]["ts"]}
        batch |= {"last_ts": records[-1]["ts"], "close_reason": "idle"}
        context = build_context(batch, records, quality_level="full", clip_noise_threshold=0.2, camera_profile=profile)
        return evidence_floor(context, profile)

    at_porch = detections(new(person(current_zones=["porch"], entered_zones=["walkway", "porch"])))
    unprofiled = floor(at_porch, None)
    assert unprofiled.level == "high" and "guessed from its name" in unprofiled.reasons[0]
    proposed = floor(at_porch, profiles["front_door"])
    assert proposed.level == "high" and "entry zone 'porch'" in proposed.reasons[0]
    on_street = detections(
        new(person(camera="driveway", box=[100, 100, 300, 900], current_zones=["street"], entered_zones=["street"]))
    )
    assert floor(on_street, profiles["driveway"]).score == 0
    assert floor(on_street, None).score == 0
