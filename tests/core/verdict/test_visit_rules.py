"""The visit as evidence (core/verdict/visit_rules.py): an unknown person at night on two cameras of one visit is
medium, on three (or reaching an entry zone after another camera) high, the reasons naming the visit; known people,
the day, one camera fire nothing; a batch's floor starts from its visit's level and a visit's level never drops; the
same plate or name on a second night of the week is medium, on a third high."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hsi_dagster.core.verdict.evidence import EvidenceRules, Floor
from hsi_dagster.core.verdict.visit_rules import VisitLevel, raised_by_visit, repeat_nights, visit_level
from hsi_dagster.core.visits.facts import visit_facts
from hsi_dagster.core.visits.linking import new_visit, with_sighting
from tests.core.visits.helpers import LONDON_NIGHT, sighting

MIN = timedelta(minutes=1)
RULES = EvidenceRules()


def visit(*sightings):
    out = new_visit(sightings[0])
    for s in sightings[1:]:
        out = with_sighting(out, s)
    return out


def level_of(*sightings) -> VisitLevel:
    return visit_level(visit_facts(visit(*sightings)), RULES)


def test_three_cameras_in_six_minutes_at_night_is_high_and_names_the_visit():
    level = level_of(
        sighting("front_door", LONDON_NIGHT),
        sighting("driveway", LONDON_NIGHT + 2 * MIN),
        sighting("side_gate", LONDON_NIGHT + 5 * MIN, seconds=40),
    )
    assert (level.score, level.level) == (70, "high")
    assert level.reasons == (
        "visit visit:front_door-023000: third camera in 6 minutes: front_door 02:30, driveway 02:32, side_gate 02:35 "
        "(a person not known at night) -> 70 high",
    )


def test_two_cameras_at_night_is_medium_and_an_entry_zone_after_them_is_high():
    two = level_of(sighting("front_door", LONDON_NIGHT), sighting("driveway", LONDON_NIGHT + 2 * MIN))
    assert (two.score, two.level) == (45, "medium") and "second camera in 3 minutes" in two.reasons[0]
    entry = level_of(sighting("street", LONDON_NIGHT), sighting("back_door", LONDON_NIGHT + 2 * MIN, entry=("porch",)))
    assert entry.score == 70 and "reached entry zone 'porch' on back_door after street" in entry.reasons[0]


def test_harmless_visits_fire_nothing():
    day = datetime(2026, 12, 2, 10, 15, tzinfo=UTC)
    postman = level_of(*(sighting(cam, day + n * MIN) for n, cam in enumerate(("gate", "front_door", "driveway"))))
    resident = level_of(
        sighting("driveway", LONDON_NIGHT - 90 * MIN, unknown=0, known=("resident:alex",)),
        sighting("front_door", LONDON_NIGHT - 89 * MIN, unknown=0, known=("resident:alex",)),
    )
    one_camera = level_of(sighting("front_door", LONDON_NIGHT), sighting("front_door", LONDON_NIGHT + 2 * MIN))
    assert [postman.score, resident.score, one_camera.score] == [0, 0, 0]
    assert postman.reasons == resident.reasons == one_camera.reasons == ()


def test_people_who_only_walked_past_fire_nothing_until_one_stops():
    """Two strangers walking along the street past two (three) cameras at night: no visit rule; one who walked past
    the front door and then stopped by the driveway makes the two-camera visit medium, as before."""
    walk = [
        replace(sighting(c, LONDON_NIGHT + n * MIN), passing=True) for n, c in enumerate(("front", "drive", "gate"))
    ]
    assert level_of(*walk[:2]).score == level_of(*walk).score == 0
    stopped = level_of(walk[0], sighting("drive", LONDON_NIGHT + 2 * MIN))
    assert stopped.score == 45 and "second camera in 3 minutes" in stopped.reasons[0]


def test_a_batch_starts_from_its_visits_level():
    high = VisitLevel(70, "high", ("visit v: third camera -> 70 high",))
    low_floor = Floor(0, "low", (), ())
    raised = raised_by_visit(low_floor, high)
    assert (raised.score, raised.level, raised.reasons) == (70, "high", high.reasons)
    critical = Floor(90, "critical", ("weapon -> 90 critical",), ())
    assert raised_by_visit(critical, high).score == 90
    assert raised_by_visit(critical, high).reasons == ("weapon -> 90 critical", *high.reasons)
    assert raised_by_visit(low_floor, VisitLevel(0, "low", ())) is low_floor


def test_a_second_visit_the_same_night_is_high_but_a_passer_by_twice_is_not():
    casing = visit_facts(visit(sighting("front_door", LONDON_NIGHT), sighting("driveway", LONDON_NIGHT + 2 * MIN)))
    back = visit_facts(visit(sighting("side_gate", LONDON_NIGHT + 90 * MIN)))
    level = visit_level(back, RULES, [casing])
    assert level.score == 70 and level.reasons == (
        "visit visit:side_gate-040000: second visit tonight: visit:front_door-023000 at 02:30 (front_door 02:30, "
        "driveway 02:32), now side_gate 04:00 (a person not known at night) -> 70 high",
    )
    passer_by = visit_facts(visit(sighting("street", LONDON_NIGHT)))
    again = visit_facts(visit(sighting("street", LONDON_NIGHT + 60 * MIN)))
    assert visit_level(again, RULES, [passer_by]).score == 0
    by_day = visit_facts(visit(sighting("side_gate", LONDON_NIGHT + 8 * 60 * MIN)))  # 10:30: not at night
    assert visit_level(by_day, RULES, [casing]).score == 0
    resident = visit_facts(visit(sighting("side_gate", LONDON_NIGHT + 90 * MIN, unknown=0, known=("resident:alex",))))
    assert visit_level(resident, RULES, [casing]).score == 0


def test_repeat_nights_count_nights_not_visits_and_never_the_day_or_the_household():
    plate = ("AB12CDE",)
    mon = sighting("street", LONDON_NIGHT, plates=plate, batch_id="mon")
    mon_again = sighting("street", LONDON_NIGHT + 60 * MIN, plates=plate, batch_id="mon2")  # the same night
    by_day = sighting("street", LONDON_NIGHT + timedelta(days=1, hours=10), plates=plate, batch_id="tue", hour=12)
    wed = sighting("street", LONDON_NIGHT + timedelta(days=2), plates=plate, batch_id="wed")
    facts = [visit_facts(visit(s)) for s in (mon, mon_again, by_day)]
    score, text = repeat_nights(visit_facts(visit(wed)), facts, RULES) or (0, "")
    assert (score, text) == (45, "second night this week: plate AB12CDE (Wed 02:30, Fri 02:30)")
    thu = sighting("street", LONDON_NIGHT + timedelta(days=3), identities=("stranger-7",), batch_id="thu")
    assert repeat_nights(visit_facts(visit(thu)), facts, RULES) is None  # another name
    old = sighting("street", LONDON_NIGHT - timedelta(days=8), plates=plate, batch_id="old")
    assert repeat_nights(visit_facts(visit(mon)), [visit_facts(visit(old))], RULES) is None  # past the week
    household = sighting("street", LONDON_NIGHT + timedelta(days=2), plates=plate, known=("plate:AB12CDE",))
    assert repeat_nights(visit_facts(visit(household)), facts, RULES) is None
    level = visit_level(visit_facts(visit(wed)), RULES, other_nights=facts)
    assert level.reasons == (
        "visit visit:wed: second night this week: plate AB12CDE (Wed 02:30, Fri 02:30) (not the household's)"
        " -> 45 medium",
    )
