"""The vision gateway's request body (core/context/gateway_protocol.py): the media URLs never carry a secret, and a
record's own fields are sent as they are, malformed ones as null."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hsi_dagster.core.context.gateway_protocol import detection_source, frigate_media_base, request_body

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://frigate:5000", "http://frigate:5000"),
        ("http://frigate:5000/", "http://frigate:5000"),
        ("https://user:pass@nvr.example.org:8971/frigate/?token=x#frag", "https://nvr.example.org:8971/frigate"),
        ("http://[fd00::5]:5000", "http://[fd00::5]:5000"),
        ("  http://Frigate.LAN  ", "http://frigate.lan"),
        ("", None),
        (None, None),
        ("frigate:5000", None),  # no scheme: not a URL a gateway could call
        ("ftp://frigate", None),
        ("http://frigate:notaport", None),
    ],
)
def test_media_base_keeps_scheme_host_port_and_path_only(url, base):
    assert frigate_media_base(url) == base


def test_source_only_for_frigate_detections_and_the_event_id_is_quoted():
    assert detection_source({"detection_id": "cam-1-0001", "track_id": "t1"}, "http://frigate:5000") is None
    untracked = detection_source({"detection_id": "frigate:17.5-x y:new:17.500000"}, "http://frigate:5000")
    assert untracked is not None
    assert untracked["event_id"] == "17.5-x y"  # from the detection id when there is no track id
    assert untracked["clip_url"] == "http://frigate:5000/api/events/17.5-x%20y/clip.mp4"


def test_malformed_fields_are_sent_as_null_not_an_error():
    body = request_body(
        {"batch_id": "b", "camera_id": "cam"},
        [{"detection_id": "d", "ts": T0, "label": "", "confidence": "high", "bbox": [1, 2], "enrichment": "x"}],
        ["florence", "bogus"],
    )
    assert body["types"] == ["florence"]
    assert body["detections"] == [
        {
            "detection_id": "d",
            "camera_id": "cam",
            "ts": T0.isoformat(),
            "label": "unknown",
            "confidence": None,
            "bbox": None,
            "track_id": None,
            "zones": [],
            "source": None,
        }
    ]
