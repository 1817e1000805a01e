"""A visit's facts (core/visits/facts.py): cameras in order with local times, span, known or not, the longest
stand-still and where, an entry zone reached after other cameras."""

from __future__ import annotations

from datetime import timedelta

from hsi_dagster.core.visits.facts import ordinal, visit_facts
from hsi_dagster.core.visits.linking import new_visit, with_sighting
from tests.core.visits.helpers import LONDON_NIGHT, sighting

MIN = timedelta(minutes=1)


def test_the_casing_visit_facts():
    visit = new_visit(sighting("front_door", LONDON_NIGHT, seconds=20))
    visit = with_sighting(visit, sighting("driveway", LONDON_NIGHT + 2 * MIN, seconds=45))
    visit = with_sighting(visit, sighting("side_gate", LONDON_NIGHT + 5 * MIN, seconds=40, entry=("gate",)))
    facts = visit_facts(visit)
    assert facts.cameras_text() == "front_door 02:30, driveway 02:32, side_gate 02:35"
    assert facts.batches == 3 and facts.span_s == 340 and facts.local_hour == 2
    assert facts.unknown_minutes == 6  # 02:30:00 .. 02:35:40, rounded up
    assert facts.longest_still_s == 45 and facts.still_where == "driveway (pavement)"
    assert facts.reached == "entry zone 'gate' on side_gate" and not facts.known


def test_a_residents_walk_is_known_and_an_entry_on_the_first_camera_is_no_reached_after():
    walk = new_visit(sighting("driveway", LONDON_NIGHT, unknown=0, known=("resident:alex",)))
    walk = with_sighting(walk, sighting("front_door", LONDON_NIGHT + MIN, unknown=0, known=("resident:alex",)))
    facts = visit_facts(walk)
    assert facts.known and facts.unknown_stops == () and facts.unknown_minutes == 0
    single = visit_facts(new_visit(sighting("front_door", LONDON_NIGHT, entry=("porch",))))
    assert single.reached is None


def test_ordinals():
    assert [ordinal(n) for n in (2, 3, 11)] == ["second", "third", "11th"]
