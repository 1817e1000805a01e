"""Neighbour cameras (core/visits/adjacency.py) and the longer reach they give a link (core/visits/linking.py):
a profile's `approached_from` and a Frigate camera group; without a graph, time alone exactly as before; each link
keeps its short reason."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hsi_dagster.core.frigate.config import camera_groups
from hsi_dagster.core.visits.adjacency import Adjacency
from hsi_dagster.core.visits.linking import VisitRules, choose_visit, link_choice, new_visit, with_sighting
from tests.core.visits.helpers import LONDON_NIGHT, sighting

MIN = timedelta(minutes=1)
GRAPH = Adjacency.of({"side_gate": ["front_door"]}, {"back": ["garden", "patio"]})


def test_the_graph_names_each_pair_either_way_and_a_profile_wins_over_a_group():
    both = Adjacency.of({"side_gate": ["front_door"]}, {"front": ["front_door", "side_gate"]})
    assert both.reason("front_door", "side_gate") == both.reason("side_gate", "front_door")
    assert both.reason("front_door", "side_gate") == "neighbour front_door->side_gate"
    assert GRAPH.reason("patio", "garden") == "camera group back"
    assert GRAPH.reason("garden", "front_door") is None and GRAPH.reason("garden", "garden") is None
    whole_site = Adjacency.of(None, {"outside": ["a", "b", "c", "d", "e"]})
    assert not whole_site  # a group of the whole site says nothing about who is next to whom


def test_frigate_camera_groups_are_read_from_the_config_lists_or_comma_strings():
    config = {
        "cameras": {"garden": {}, "patio": {}, "front_door": {}},
        "camera_groups": {
            "back": {"cameras": ["garden", "patio", "birdseye"], "icon": "LuTree"},
            "front": {"cameras": "front_door, patio"},
            "broken": {"cameras": 7},
            "alone": {"cameras": ["garden"]},
        },
    }
    assert camera_groups(config) == {"back": ("garden", "patio"), "front": ("front_door", "patio")}
    assert camera_groups({"cameras": {}}) == {} and camera_groups(None) == {}


def test_a_neighbour_links_within_twice_the_gap_and_says_so():
    rules = VisitRules(adjacency=GRAPH)
    first = new_visit(sighting("front_door", LONDON_NIGHT))
    late = sighting("side_gate", LONDON_NIGHT + 8 * MIN)  # 7 m 40 s after the front door: past the 300 s gap
    visit, choice = link_choice(late, [first], rules)
    assert visit.visit_id == first.visit_id and choice.reason == "neighbour front_door->side_gate"
    assert choice.why == f"neighbour front_door->side_gate: within 600 s of {first.visit_id}"
    # the same look without the graph, or on a camera that is no neighbour, is a new visit
    assert choose_visit(late, [first], VisitRules()).visit is None
    assert choose_visit(sighting("garden", LONDON_NIGHT + 8 * MIN), [first], rules).visit is None
    # and past twice the gap even a neighbour is another visit
    assert choose_visit(sighting("side_gate", LONDON_NIGHT + 11 * MIN), [first], rules).visit is None


def test_a_shared_plate_beats_a_neighbour_and_a_neighbour_beats_a_nearer_visit_in_time():
    rules = VisitRules(adjacency=GRAPH)
    by_neighbour = new_visit(sighting("front_door", LONDON_NIGHT, batch_id="fd"))
    by_time = new_visit(sighting("garden", LONDON_NIGHT + 2 * MIN, batch_id="gd"))
    look = sighting("side_gate", LONDON_NIGHT + 3 * MIN)
    assert choose_visit(look, [by_time, by_neighbour], rules).visit is by_neighbour
    by_plate = new_visit(sighting("street", LONDON_NIGHT, batch_id="st", plates=("AB12CDE",)))
    car = sighting("side_gate", LONDON_NIGHT + 3 * MIN, plates=("AB12CDE",))
    choice = choose_visit(car, [by_time, by_neighbour, by_plate], rules)
    assert choice.visit is by_plate and choice.reason == "plate AB12CDE"
    stranger = sighting("garden", LONDON_NIGHT + 3 * MIN, identities=("stranger-7",))
    seen = new_visit(sighting("street", LONDON_NIGHT, batch_id="s7", identities=("stranger-7",)))
    assert choose_visit(stranger, [seen], VisitRules()).reason == "reid stranger-7"
    assert choose_visit(sighting("garden", LONDON_NIGHT + MIN), [seen], VisitRules()).reason == "time"


def test_an_adjacent_factor_below_one_is_refused():
    with pytest.raises(ValueError, match="adjacent_factor"):
        VisitRules(adjacent_factor=0.5)


def test_an_evidence_alerts_sighting_is_replaced_by_its_batch_whichever_came_first():
    rules = VisitRules()
    alert = sighting("garage", LONDON_NIGHT + timedelta(seconds=5), seconds=5, batch_id="evidence:garage:t1:1")
    batch = sighting("garage", LONDON_NIGHT, seconds=40, batch_id="garage-b1")
    # alert first: the batch joins the alert's visit and takes its sighting's place, even past the bounds
    tight = VisitRules(max_batches=1)
    visit, choice = link_choice(batch, [new_visit(alert)], tight, replaces=("evidence:garage:t1:1",))
    assert visit.visit_id == "visit:evidence:garage:t1:1" and visit.batch_ids == ("garage-b1",)
    assert choice.reason == "evidence alert garage:t1:1"
    # batch first: the alert joins the batch's visit and adds no second sighting of the same detections
    visit, choice = link_choice(alert, [new_visit(batch)], rules)
    assert visit.batch_ids == ("garage-b1",) and choice.reason == "time"
    # an alert on another camera of the visit is a sighting of its own
    other = sighting("porch", LONDON_NIGHT + MIN, seconds=5, batch_id="evidence:porch:t2:1")
    visit, _ = link_choice(other, [with_sighting(new_visit(batch), alert)], rules)
    assert set(visit.batch_ids) == {"garage-b1", "evidence:garage:t1:1", "evidence:porch:t2:1"}
