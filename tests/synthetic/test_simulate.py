"""The simulator: deterministic, realistic enough to exercise every scenario, and always valid."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hsi_dagster.core.intake.detections import ENRICHMENT_SPEC, Detection, Rejection, validate_record
from hsi_dagster.storage.ingest import ingest_lines
from hsi_dagster.synthetic import streams as sim
from hsi_dagster.synthetic.bad_lines import BAD_KINDS, bad_lines
from hsi_dagster.synthetic.jsonl import write_jsonl
from hsi_dagster.synthetic.live import simulate_live

START = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def two_days() -> list[tuple[str, dict]]:
    return list(sim.simulate_with_scenarios(3, start=START, duration_s=2 * 86400, events_per_hour=25))


def test_same_seed_gives_byte_identical_files(tmp_path: Path) -> None:
    for name in ("a.jsonl", "a.jsonl.gz"):
        first, second, other = tmp_path / f"1-{name}", tmp_path / f"2-{name}", tmp_path / f"3-{name}"
        write_jsonl(first, sim.simulate(42, start=START, duration_s=1800))
        write_jsonl(second, sim.simulate(42, start=START, duration_s=1800))
        write_jsonl(other, sim.simulate(43, start=START, duration_s=1800))
        assert first.read_bytes() == second.read_bytes()
        assert first.read_bytes() != other.read_bytes()
    assert not list(tmp_path.glob(".*.part"))


def test_ids_differ_between_runs_and_records_come_in_time_order() -> None:
    a = list(sim.simulate(1, start=START, duration_s=3600))
    b = list(sim.simulate(1, start=START + timedelta(days=1), duration_s=3600))
    assert len({r["detection_id"] for r in a}) == len(a)
    assert not {r["detection_id"] for r in a} & {r["detection_id"] for r in b}
    times = [datetime.fromisoformat(r["ts"].replace("Z", "+00:00")) for r in a]
    assert times == sorted(times) and times[0] >= START and times[-1] < START + timedelta(hours=1)


def test_every_scenario_appears_with_its_signature(two_days: list[tuple[str, dict]]) -> None:
    by_scenario: dict[str, list[dict]] = defaultdict(list)
    for scenario, record in two_days:
        by_scenario[scenario].append(record)
    assert set(by_scenario) == set(sim.SCENARIOS)
    enrichments = lambda s: [r["enrichment"] for r in by_scenario[s] if "enrichment" in r]  # noqa: E731
    assert any(r["label"] == "package" for r in by_scenario["delivery"])
    assert any(e.get("reid", {}).get("known") for e in enrichments("resident_home"))
    assert any("pet" in e for e in enrichments("pet"))
    assert {r["label"] for r in by_scenario["wildlife"]} & {"deer", "fox", "raccoon", "bird"}
    assert any(
        e["scene"]["lighting"] == "night" and e.get("clothing", {}).get("suspicious") for e in enrichments("loitering")
    )
    assert any(e.get("vehicle", {}).get("damage") not in (None, False) for e in enrichments("vehicle_breakin"))
    assert any(r["camera_id"] == "street" for r in by_scenario["passing_car"])


def test_enrichment_looks_like_the_vision_models(two_days: list[tuple[str, dict]]) -> None:
    enrichments = [r["enrichment"] for _, r in two_days if "enrichment" in r]
    assert 0.2 < len(enrichments) / len(two_days) < 0.5
    keys = Counter(k for e in enrichments for k in e)
    assert set(keys) >= set(ENRICHMENT_SPEC)  # every vision model of the contract
    florence = [e["florence"] for e in enrichments if "florence" in e]
    assert any(f["dense_caption"] == f["caption"] for f in florence)  # dense captions sometimes repeat the caption
    assert any(r["caption"] == f["caption"] for f in florence for r in f["regions"])  # and so do region captions
    assert any(c["score"] < 0.2 for e in enrichments for c in e.get("clip", []))  # low-score CLIP noise
    assert {e["scene"]["lighting"] for e in enrichments} == {"day", "dusk", "night"}
    assert any(r["ts"].endswith("+01:00") for _, r in two_days)  # a camera reporting local time


def test_every_generated_record_is_valid_and_takes_the_fast_path(
    tmp_path: Path, two_days: list[tuple[str, dict]]
) -> None:
    lines = [json.dumps(r) for _, r in two_days[:4000]]
    for n, text in enumerate(lines):
        assert isinstance(validate_record(text, source="sim", line_no=n), Detection), text
    report = ingest_lines(tmp_path / "hsi.duckdb", lines)
    assert report.loaded == len(lines) and report.files[0].rescued <= len(lines) // 50  # only unknown nested fields


def test_bad_lines_are_all_refused_naming_their_field() -> None:
    items = bad_lines(5, 200)
    assert items == bad_lines(5, 200)
    assert {item.kind for item in items} == set(BAD_KINDS)
    for n, item in enumerate(items):
        result = validate_record(item.line, source="bad", line_no=n)
        assert isinstance(result, Rejection) and result.field == item.field, (item.kind, result)


def test_live_mode_writes_whole_files_into_the_inbox(tmp_path: Path) -> None:
    clock = [1_800_000_000.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    files = simulate_live(tmp_path / "inbox", rate_per_s=40, seconds=6, seed=8, clock=lambda: clock[0], sleep=sleep)
    assert files and all(f.parent == tmp_path / "inbox" and f.suffix == ".jsonl" for f in files)
    assert not list((tmp_path / "inbox").glob(".*"))  # no half-written temp file left behind
    assert sum(sleeps) == pytest.approx(6, abs=0.01)
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert 40 <= len(records) <= 1500
    begin = datetime.fromtimestamp(1_800_000_000, tz=UTC)
    assert all(
        begin <= datetime.fromisoformat(r["ts"].replace("Z", "+00:00")) < begin + timedelta(seconds=6) for r in records
    )


def test_live_mode_with_an_activity_start_plays_the_same_stream_whenever_it_runs(tmp_path: Path) -> None:
    """The activity depends on the time of day; a fixed activity clock gives the same detections (ids, cameras,
    labels, gaps) at any hour, timestamps moved to the moment the stream is played."""
    activity = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)

    def play(now: float, inbox: Path) -> list[dict]:
        clock = [now]

        def sleep(seconds: float) -> None:
            clock[0] += seconds

        files = simulate_live(inbox, 0.5, 60, 7, activity_start=activity, clock=lambda: clock[0], sleep=sleep)
        return [json.loads(line) for f in files for line in f.read_text().splitlines()]

    morning, evening = play(1_800_000_000.0, tmp_path / "a"), play(1_800_030_000.0, tmp_path / "b")
    assert morning and [r["detection_id"] for r in morning] == [r["detection_id"] for r in evening]
    assert [(r["camera_id"], r["label"]) for r in morning] == [(r["camera_id"], r["label"]) for r in evening]

    def ts(record: dict) -> datetime:
        return datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))

    assert all(ts(b) - ts(a) == timedelta(seconds=30_000) for a, b in zip(morning, evening, strict=True))
    begin = datetime.fromtimestamp(1_800_000_000, tz=UTC)
    assert all(begin <= ts(r) < begin + timedelta(seconds=60) for r in morning)


def test_the_event_rate_constant_matches_the_simulator() -> None:
    day = list(sim.simulate(0, start=datetime(2026, 1, 5, tzinfo=UTC), duration_s=24 * 3600, events_per_hour=20))
    assert len(day) / (24 * 20) == pytest.approx(sim.AVERAGE_DETECTIONS_PER_EVENT, rel=0.35)
