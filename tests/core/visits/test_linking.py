"""Linking sightings into visits (core/visits/linking.py): by time alone with no camera graph, kept apart by two
different known people, strengthened by a shared identity or plate, bounded in span and batches, across midnight
and clock skew."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hsi_dagster.core.visits.linking import Visit, VisitRules, choose_visit, link, new_visit, with_sighting
from tests.core.visits.helpers import LONDON_NIGHT, sighting

MIN = timedelta(minutes=1)


def visit_of(*sightings) -> Visit:
    visit = new_visit(sightings[0])
    for s in sightings[1:]:
        visit = with_sighting(visit, s)
    return visit


def test_looks_two_and_three_minutes_apart_on_three_cameras_are_one_visit():
    rules = VisitRules()
    first = sighting("front_door", LONDON_NIGHT)
    visit, why = link(sighting("driveway", LONDON_NIGHT + 2 * MIN), [new_visit(first)], rules)
    assert visit.visit_id == "visit:front_door-023000" and "within 300 s" in why
    visit, _ = link(sighting("side_gate", LONDON_NIGHT + 5 * MIN), [visit], rules)
    assert visit.cameras == ("front_door", "driveway", "side_gate")
    assert len(visit.sightings) == 3 and visit.span_s == 5 * 60 + 20


def test_a_look_past_the_gap_starts_a_new_visit_and_says_why():
    visit, why = link(
        sighting("driveway", LONDON_NIGHT + 10 * MIN), [new_visit(sighting("front_door", LONDON_NIGHT))], VisitRules()
    )
    assert visit.visit_id == "visit:driveway-024000"
    assert why.startswith("new visit (more than 300 s from visit:front_door-023000")


def test_a_batch_judged_out_of_order_joins_the_visit_before_its_start():
    later = new_visit(sighting("side_gate", LONDON_NIGHT + 3 * MIN))
    visit, _ = link(sighting("front_door", LONDON_NIGHT), [later], VisitRules())
    assert visit.visit_id == later.visit_id and visit.cameras == ("front_door", "side_gate")


def test_two_different_known_people_at_once_are_not_one_visit():
    alex = new_visit(sighting("driveway", LONDON_NIGHT, unknown=0, known=("resident:alex",)))
    choice = choose_visit(sighting("garden", LONDON_NIGHT, unknown=0, known=("resident:sam",)), [alex], VisitRules())
    assert choice.visit is None and "different known people (resident:sam / resident:alex)" in choice.why
    same = choose_visit(
        sighting("front_door", LONDON_NIGHT + MIN, unknown=0, known=("resident:alex",)), [alex], VisitRules()
    )
    assert same.visit is alex and same.why.startswith("same resident:alex")


def test_a_shared_plate_or_reid_wins_over_a_nearer_visit_in_time():
    by_plate = new_visit(sighting("street", LONDON_NIGHT, plates=("KX73ABC",)))
    nearer = new_visit(sighting("garden", LONDON_NIGHT + 3 * MIN))
    choice = choose_visit(
        sighting("driveway", LONDON_NIGHT + 4 * MIN, plates=("KX73ABC",)), [nearer, by_plate], VisitRules()
    )
    assert choice.visit is by_plate and choice.why == "same plate:KX73ABC as visit:street-023000"


def test_a_visit_spanning_midnight_and_a_camera_clock_behind_still_links():
    before_midnight = datetime(2026, 12, 2, 23, 58, tzinfo=UTC)
    visit = new_visit(sighting("front_door", before_midnight))
    linked, _ = link(sighting("driveway", before_midnight + 4 * MIN), [visit], VisitRules())
    assert linked.visit_id == visit.visit_id and linked.last_ts.day == 3
    # a camera whose clock runs 5 min 20 s behind: the gap plus the skew allowance still reaches it
    skewed, _ = link(sighting("garden", before_midnight - timedelta(seconds=300 + 20 + 25)), [visit], VisitRules())
    assert skewed.visit_id == visit.visit_id


def test_a_street_party_never_grows_one_visit_without_end():
    rules = VisitRules(max_batches=5, max_span_s=600)
    visit = new_visit(sighting("street", LONDON_NIGHT, batch_id="b0"))
    ids, whys = [visit.visit_id], []
    for n in range(1, 20):
        visit, why = link(
            sighting("street", LONDON_NIGHT + timedelta(seconds=20 * n), batch_id=f"b{n}"), [visit], rules
        )
        ids.append(visit.visit_id)
        whys.append(why)
        assert len(visit.sightings) <= 5
    assert sorted(set(ids)) == ["visit:b0", "visit:b10", "visit:b15", "visit:b5"]
    assert whys[4] == "new visit (visit:b0 is full (5 batches, VISIT_MAX_BATCHES))"
    long_walk = visit_of(*(sighting("street", LONDON_NIGHT + n * 4 * MIN, batch_id=f"w{n}") for n in range(3)))
    choice = choose_visit(
        sighting("street", LONDON_NIGHT + 12 * MIN, batch_id="w3"), [long_walk], VisitRules(max_span_s=600)
    )
    assert choice.visit is None and "VISIT_MAX_SPAN_SECONDS 600" in choice.why


def test_linking_the_same_batch_again_adds_nothing():
    first = sighting("front_door", LONDON_NIGHT)
    visit = visit_of(first, sighting("driveway", LONDON_NIGHT + MIN))
    again, why = link(first, [visit], VisitRules())
    assert again.sightings == visit.sightings and why.startswith("already in")


def test_rules_refuse_nonsense_with_the_field_named():
    with pytest.raises(ValueError, match="max_batches"):
        VisitRules(max_batches=0)
    with pytest.raises(ValueError, match="gap_s"):
        VisitRules(gap_s=0)
