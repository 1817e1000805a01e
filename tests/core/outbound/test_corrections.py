"""A correction's own fields and the verdict it names: every bad input is a Refusal naming the field, never a crash."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from hsi_dagster.core.outbound.corrections import (
    LATEST,
    NOTE_MAX_CHARS,
    PAYLOAD_MAX_BYTES,
    CorrectedVerdict,
    CorrectionRefused,
    check_against,
    check_request,
    command_camera,
    direction,
    parse_command,
    rate_refusal,
    unknown_camera,
)

VERDICT = CorrectedVerdict("yard-1", "yard", "medium", 45, datetime(2026, 1, 1, tzinfo=UTC))


def refused_field(call, *args, **kwargs) -> str:
    with pytest.raises(CorrectionRefused) as info:
        call(*args, **kwargs)
    return info.value.refusal.field


def test_a_valid_request_is_normalised() -> None:
    request = check_request(" yard-1 ", "LOW", "  the neighbour's car\x07 ", source="cli")
    assert (request.batch_id, request.level, request.note, request.source) == (
        "yard-1",
        "low",
        "the neighbour's car",
        "cli",
    )
    assert check_request("yard-1", "high", "", source="mqtt").note is None


@pytest.mark.parametrize(
    ("batch_id", "level", "note", "field"),
    [
        (None, "low", None, "batch_id"),
        ("", "low", None, "batch_id"),
        (7, "low", None, "batch_id"),
        ("x" * 201, "low", None, "batch_id"),
        ("yard-1", "severe", None, "level"),
        ("yard-1", None, None, "level"),
        ("yard-1", 3, None, "level"),
        ("yard-1", "low", 5, "note"),
        ("yard-1", "low", "n" * (NOTE_MAX_CHARS + 1), "note"),
    ],
)
def test_bad_fields_are_refused_by_name(batch_id, level, note, field) -> None:
    assert refused_field(check_request, batch_id, level, note, source="mqtt") == field


def test_unknown_source_is_refused() -> None:
    assert refused_field(check_request, "yard-1", "low", source="email") == "source"


@pytest.mark.parametrize(
    "payload",
    [b"{", b"not json", b"\xff\xfe", b"[1, 2]", b'"low"', b"null", b"x" * (PAYLOAD_MAX_BYTES + 1)],
)
def test_malformed_or_oversized_payloads_are_refused_as_payload(payload: bytes) -> None:
    assert refused_field(parse_command, payload) == "payload"


def test_a_command_payload_parses() -> None:
    request = parse_command(json.dumps({"batch_id": LATEST, "level": "low", "note": "false alarm"}).encode())
    assert (request.batch_id, request.level, request.note, request.source) == (LATEST, "low", "false alarm", "mqtt")
    assert refused_field(parse_command, json.dumps({"batch_id": "b", "level": "meh"}).encode()) == "level"


def test_command_topic_names_the_camera() -> None:
    assert command_camera("hsi/yard/correction", "hsi") == "yard"
    assert command_camera("home/hsi/yard/correction", "home/hsi") == "yard"
    assert command_camera("hsi/yard/state", "hsi") is None
    assert command_camera("hsi/yard/correction/x", "hsi") is None
    assert command_camera("other/yard/correction", "hsi") is None
    assert command_camera("hsi//correction", "hsi") is None


def test_the_verdict_must_exist_and_belong_to_the_topic_camera() -> None:
    request = check_request("yard-1", "low", source="mqtt")
    assert refused_field(check_against, request, None) == "batch_id"
    assert refused_field(check_against, request, VERDICT, "door") == "camera"
    correction = check_against(request, VERDICT, "yard")
    assert correction.verdict is VERDICT and correction.direction == "lower"


def test_which_way_a_correction_went() -> None:
    assert direction("medium", "low") == "lower"
    assert direction("low", "critical") == "higher"
    assert direction("high", "high") == "confirmed"
    assert direction(None, "low") == "higher"  # an assessment without a level: anything is above it


def test_unknown_camera_and_rate_bound() -> None:
    assert unknown_camera("yard", ["yard", "door"]) is None
    refusal = unknown_camera("garage", ["yard"])
    assert refusal is not None and refusal.field == "camera" and "garage" in refusal.reason
    assert rate_refusal("yard", 9, 10) is None
    limited = rate_refusal("yard", 10, 10)
    assert limited is not None and limited.field == "rate" and "limit 10" in str(limited)
