"""What the floor raises and misses at a camera without a usable profile (core/verdict/coverage.py): the text
`hsi config check` prints per camera (issue 40 item 8)."""

from __future__ import annotations

from hsi_dagster.core.context.camera_profiles import CameraProfile
from hsi_dagster.core.verdict.coverage import camera_coverage


def test_no_profile_names_the_zone_rules_and_the_time_zone():
    coverage = camera_coverage("driveway", None, ["street", "driveway"], vision_models=False)
    assert coverage is not None
    text = coverage.message()
    assert "a weapon" in text and "a person not known at night on an entry or private zone (70 high)" in text
    assert "guessed from their names (from the zone names: private driveway; public street)" in text
    assert "on no such zone (45 medium" in text  # the unprofiled default (core/verdict/watched_zones.py)
    assert "night hours are read in UTC" in text and "approached_from" in text
    assert "they need an action or violence model" in text  # Frigate sends none
    assert "hsi frigate profiles --out cameras.yaml" in text and "(street, driveway)" in text
    with_gateway = camera_coverage("driveway", None, ["street"], vision_models=True)
    assert with_gateway is not None
    assert any("gateway's action and violence readings" in line for line in with_gateway.detects)


def test_a_camera_without_zones_is_told_to_draw_them_first():
    coverage = camera_coverage("garage", None, [], vision_models=False)
    assert coverage is not None and "no zones in Frigate" in coverage.advice


def test_a_profile_with_watched_zones_frigate_reports_is_covered():
    profile = CameraProfile(camera_id="front_door", zones=["porch", "street"], entry_zones=["porch"])
    assert camera_coverage("front_door", profile, ["porch", "street"], vision_models=False) is None
    assert camera_coverage("front_door", profile, None, vision_models=False) is None  # zones unknown: trusted


def test_a_profile_watching_nothing_or_zones_frigate_does_not_have():
    bare = CameraProfile(camera_id="yard", zones=["lawn"])
    coverage = camera_coverage("yard", bare, ["lawn"], vision_models=False)
    assert coverage is not None and "names no entry_zones or private_zones" in coverage.message()
    typo = CameraProfile(camera_id="yard", zones=["lawns"], private_zones=["lawns"])
    coverage = camera_coverage("yard", typo, ["lawn"], vision_models=False)
    assert (
        coverage is not None
        and "'lawns'" in coverage.message()
        and "Frigate's zones of this camera: lawn" in (coverage.advice)
    )
