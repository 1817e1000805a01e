"""storage/frigate.py and `hsi frigate import`: recorded Frigate payloads through the ingest path (validation,
quarantine with line numbers and reasons naming the field, idempotency), on real DuckDB files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hsi_dagster.cli.main import main
from hsi_dagster.storage.db import connect
from hsi_dagster.storage.frigate import import_frigate_files, read_frigate_file
from hsi_dagster.storage.frigate_config import load_detect_resolutions
from hsi_dagster.synthetic.frigate import frigate_night, mqtt_lines, write_night
from tests.support.fake_frigate import FakeFrigate, serve_frigate

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "frigate"
TABLES = ("detections", "quarantine", "frigate_tracks", "frigate_sources", "ingested_files", "detection_batches")


def snapshot(db: Path) -> dict[str, list[tuple]]:
    with connect(db, read_only=True) as conn:
        return {table: sorted(map(repr, conn.execute(f"SELECT * FROM {table}").fetchall())) for table in TABLES}


@pytest.fixture
def night(tmp_path: Path) -> dict[str, Path]:
    return write_night(tmp_path / "night", malformed=True)


def test_the_recorded_night_in_tests_data_is_the_generators_output(tmp_path: Path) -> None:
    fresh = write_night(tmp_path, malformed=True)
    for kind, path in fresh.items():
        assert (FIXTURE / path.name).read_text() == path.read_text(), (
            f"regenerate {kind}: write_night(..., malformed=True)"
        )


def test_importing_the_same_files_twice_changes_nothing(tmp_path: Path, night: dict[str, Path]) -> None:
    db = tmp_path / "hsi.duckdb"
    resolutions = load_detect_resolutions(night["config"]).by_camera
    first = import_frigate_files(db, [night["mqtt"], night["api"]], resolutions=resolutions)
    before = snapshot(db)
    second = import_frigate_files(db, [night["mqtt"], night["api"]], resolutions=resolutions)
    assert snapshot(db) == before
    assert sum(r.detections for r in first.files) == len(before["detections"]) > 0
    assert sum(r.detections for r in second.files) == 0
    assert sum(r.duplicates for r in second.files) == len(before["detections"])


def test_quarantine_keeps_the_payload_its_line_and_a_reason_naming_the_field(
    tmp_path: Path, night: dict[str, Path]
) -> None:
    db = tmp_path / "hsi.duckdb"
    import_frigate_files(db, [night["mqtt"]], resolutions=load_detect_resolutions(night["config"]).by_camera)
    lines = night["mqtt"].read_text().split("\n")
    with connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT source, line_no, raw, reason FROM quarantine ORDER BY line_no").fetchall()
    assert [row[0] for row in rows] == [str(night["mqtt"].resolve())] * 4
    for _, line_no, raw, _reason in rows:
        assert raw == lines[line_no - 1]  # the original payload of that line
    fields = [reason.split(":", 1)[0] for *_, reason in rows]
    assert sorted(fields) == ["after.box", "after.camera", "after.camera", "payload"]


def test_an_api_answer_is_numbered_by_item_and_a_broken_item_is_quarantined(tmp_path: Path) -> None:
    _, items = frigate_night(seed=1)
    items[2]["data"]["box"] = [0.5, 0.5, 0.7, 0.1]
    answer = tmp_path / "events.json"
    answer.write_text(json.dumps(items, indent=2)[:-2] + ', {"id": "cut')  # the last item is truncated
    messages = read_frigate_file(answer)
    assert [m.line_no for m in messages] == [1, 2, 3, 4, 5] and {m.kind for m in messages} == {"api_event"}
    db = tmp_path / "hsi.duckdb"
    report = import_frigate_files(db, [answer], resolutions={}).files[0]
    assert report.detections == 3 and report.quarantined == 2
    with connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT line_no, reason FROM quarantine ORDER BY line_no").fetchall()
    assert rows[0][0] == 3 and rows[0][1].startswith("data.box:")
    assert rows[1][0] == 5 and rows[1][1].startswith("payload: not valid JSON")


def test_topic_lines_and_a_description_in_a_later_file_find_their_track(tmp_path: Path) -> None:
    messages, _ = frigate_night(seed=4)
    descriptions = [m for m in messages if m[0].endswith("tracked_object_update")]
    events = [m for m in messages if m[0].endswith("/events")]
    first, later = tmp_path / "events.txt", tmp_path / "descriptions.txt"
    first.write_text("\n".join(mqtt_lines(events, with_topics=True)) + "\n\n")  # mosquitto_sub -v output
    later.write_text("\n".join(mqtt_lines(descriptions, with_topics=True)) + "\n")
    db = tmp_path / "hsi.duckdb"
    config = tmp_path / "frigate.yml"
    write_night(tmp_path)  # writes frigate.yml beside
    resolutions = load_detect_resolutions(config).by_camera
    import_frigate_files(db, [first], resolutions=resolutions)
    report = import_frigate_files(db, [later], resolutions=resolutions).files[0]
    assert report.detections == len(descriptions) == 2 and report.quarantined == 0
    with connect(db, read_only=True) as conn:
        captions = conn.execute(
            "SELECT label, enrichment->>'$.florence.caption' FROM detections WHERE detection_id LIKE '%:description:%'"
        ).fetchall()
    assert {label for label, _ in captions} == {"person"} and all(caption for _, caption in captions)


def test_hsi_frigate_import_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("HSI_ENV_FILE", str(tmp_path / "no.env"))
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(tmp_path / "unused.duckdb"))
    monkeypatch.delenv("FRIGATE_URL", raising=False)
    monkeypatch.delenv("FRIGATE_CONFIG_PATH", raising=False)
    db = str(tmp_path / "hsi.duckdb")
    mqtt, api, config = FIXTURE / "frigate-night.jsonl", FIXTURE / "frigate-events.json", FIXTURE / "frigate.yml"
    assert main(["frigate", "import", "--db", db, str(api)]) == 0  # an API answer needs no config
    assert main(["frigate", "import", "--db", db, str(mqtt)]) == 2  # pixels need the detect resolutions
    assert "--frigate-config" in capsys.readouterr().err
    assert main(["frigate", "import", "--db", db, str(mqtt), "--frigate-config", str(config)]) == 0
    assert "21 detections loaded" in capsys.readouterr().out
    assert (
        main(["frigate", "import", "--db", db, str(tmp_path / "missing.jsonl"), "--frigate-config", str(config)]) == 2
    )
    assert "missing.jsonl" in capsys.readouterr().err
    # without a config file, the resolutions come from Frigate's /api/config (a fake serving a recorded answer)
    fake = FakeFrigate([], config=yaml.safe_load(config.read_text()))
    with serve_frigate(fake) as url:
        monkeypatch.setenv("FRIGATE_URL", url)
        assert main(["frigate", "import", "--db", str(tmp_path / "other.duckdb"), str(mqtt)]) == 0
    assert "21 detections loaded" in capsys.readouterr().out and ("/api/config", {}) in fake.requests


def test_hsi_demo_on_a_frigate_night_refuses_bad_arguments_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("HSI_ENV_FILE", str(tmp_path / "no.env"))
    monkeypatch.setenv("HSI_DUCKDB_PATH", str(tmp_path / "unused.duckdb"))
    for name in ("FRIGATE_URL", "FRIGATE_CONFIG_PATH"):
        monkeypatch.delenv(name, raising=False)
    db = str(tmp_path / "demo.duckdb")
    assert main(["demo", "--db", db, "--frigate", str(tmp_path / "none.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["demo", "--db", db, "--frigate", str(FIXTURE / "frigate-night.jsonl")]) == 2
    assert "--frigate-config" in capsys.readouterr().err
    assert not Path(db).exists()


def test_frigate_input_is_held_to_the_ingest_bounds(tmp_path: Path, night: dict[str, Path]) -> None:
    """Contract section 6 holds for Frigate input too: a label over INGEST_MAX_LABEL_CHARS quarantines the event,
    naming the Frigate field and the setting."""
    from hsi_dagster.core.intake.detections import Bounds

    resolutions = load_detect_resolutions(night["config"]).by_camera
    roomy = import_frigate_files(tmp_path / "a.duckdb", [night["mqtt"]], resolutions=resolutions).files[0]
    tight = import_frigate_files(
        tmp_path / "b.duckdb", [night["mqtt"]], resolutions=resolutions, bounds=Bounds(label_chars=3)
    ).files[0]
    assert roomy.detections > 0 and tight.detections < roomy.detections
    with connect(tmp_path / "b.duckdb", read_only=True) as conn:
        reasons = [r for (r,) in conn.execute("SELECT reason FROM quarantine").fetchall()]
    assert any("label: must be 1-3 characters" in r and "INGEST_MAX_LABEL_CHARS" in r for r in reasons)
