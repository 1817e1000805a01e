"""HttpEnrichmentResource against FAKE vision gateways (small http.server threads on 127.0.0.1, not a real gateway).

They prove the overall deadline holds (slow, trickling and stalled servers), that a failing gateway does not stop
the batch, that what is ready is kept, and that missing types are reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hsi_dagster.core.context.enrichment import QUALITY_LEVEL_TYPES
from hsi_dagster.definitions import build_resources
from hsi_dagster.resources import HttpEnrichmentResource, InlineEnrichmentResource
from hsi_dagster.settings import SettingsError, load_settings

pytestmark = pytest.mark.fault

T0 = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
DETECTIONS = [
    {
        "detection_id": "d1",
        "camera_id": "cam",
        "ts": T0,
        "label": "person",
        "confidence": 0.9,
        "track_id": "t1",
        "enrichment": {"scene": {"description": "porch", "lighting": "night", "indoor": False}},
    },
    {
        "detection_id": "d2",
        "camera_id": "cam",
        "ts": T0 + timedelta(seconds=3),
        "label": "person",
        "confidence": 0.8,
        "track_id": "t1",
        "enrichment": None,
    },
]
BATCH = {"batch_id": "b1", "camera_id": "cam"}
TYPES = QUALITY_LEVEL_TYPES["standard"]
SLACK_S = 0.6


class FakeGateway:
    """A fake vision gateway; `behaviour(handler, body)` writes the reply."""

    def __init__(self, behaviour):
        self.requests: list[dict] = []
        self.release = threading.Event()
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server API)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                gateway.requests.append({"path": self.path, "body": body})
                behaviour(self, body, gateway.release)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def reply_json(handler, status, payload, content_type="application/json"):
    data = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def ok(handler, body, release):
    reply_json(
        handler,
        200,
        {
            "results": {
                "d1": {"florence": {"caption": "a man at the door"}, "clip": [{"label": "intruder", "score": 0.7}]},
                "d2": {"florence": {"caption": "a man leaves"}, "bogus_type": {}},
                "unknown-id": {"florence": {"caption": "ignored"}},
            },
            "missing": ["reid"],
        },
    )


def slow(handler, body, release):
    release.wait(10)  # far beyond the deadline
    with contextlib.suppress(OSError):  # the client gave up long ago
        reply_json(handler, 200, {"results": {}})


def trickle(handler, body, release):
    """Sends headers and then one byte at a time, never finishing within the deadline."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    with contextlib.suppress(OSError):
        for _ in range(200):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            if release.wait(0.1):
                return


def failing(handler, body, release):
    reply_json(handler, 500, {"error": "model crashed"})


def partial_stream(handler, body, release):
    """NDJSON: CLIP finishes at once, everything else stalls past the deadline."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/x-ndjson")
    handler.end_headers()
    lines = [
        {"detection_id": "d1", "type": "clip", "payload": [{"label": "intruder", "score": 0.7}]},
        {"detection_id": "d2", "type": "clip", "payload": [{"label": "resident", "score": 0.4}]},
        {"done": "clip"},
        {"detection_id": "d1", "type": "florence", "payload": {"caption": "a man at the door"}},
    ]
    with contextlib.suppress(OSError):
        handler.wfile.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        handler.wfile.flush()
        release.wait(10)


def http_enrichment(url: str, timeout_s: float) -> HttpEnrichmentResource:
    return HttpEnrichmentResource(gateway_url=url, timeout_seconds=timeout_s)


def test_inline_is_the_default_and_changes_nothing():
    result = InlineEnrichmentResource().fetch(BATCH, DETECTIONS, TYPES)
    assert result.detections == DETECTIONS and result.missing_types == ()
    assert isinstance(build_resources(load_settings(os.devnull))["enrichment"], InlineEnrichmentResource)


def test_backend_setting_picks_the_gateway_class_with_its_url_and_deadline():
    chosen = build_resources(
        load_settings(
            os.devnull,
            ENRICHMENT_BACKEND="http",
            ENRICHMENT_GATEWAY_URL="http://127.0.0.1:9/gw",
            ENRICHMENT_TIMEOUT_SECONDS="2.5",
            FRIGATE_URL="http://viewer:s3cret@frigate:5000/?token=abc",
        )
    )["enrichment"]
    assert isinstance(chosen, HttpEnrichmentResource)
    assert (chosen.gateway_url, chosen.timeout_seconds) == ("http://127.0.0.1:9/gw", 2.5)
    assert chosen.frigate_url == "http://frigate:5000"  # the resource's config never holds Frigate's credentials
    with pytest.raises(SettingsError, match="ENRICHMENT_BACKEND='grpc' is invalid: accepted values are 'inline'"):
        load_settings(os.devnull, ENRICHMENT_BACKEND="grpc")


def test_gateway_results_are_merged_and_the_request_is_documented_shape():
    with FakeGateway(ok) as gateway:
        result = http_enrichment(gateway.url, 5).fetch(BATCH, DETECTIONS, TYPES)
    [request] = gateway.requests
    assert request["path"] == "/v1/enrich"
    assert request["body"]["batch_id"] == "b1" and request["body"]["types"] == list(TYPES)
    assert request["body"]["detections"][0] == {
        "detection_id": "d1",
        "camera_id": "cam",
        "ts": T0.isoformat(),
        "label": "person",
        "confidence": 0.9,
        "bbox": None,
        "track_id": "t1",
        "zones": [],
        "source": None,  # not from Frigate: the gateway finds the frames by camera and time
    }
    d1, d2 = result.detections
    assert d1["enrichment"]["florence"]["caption"] == "a man at the door"
    assert d1["enrichment"]["scene"]["lighting"] == "night"  # inline payload kept
    assert "bogus_type" not in d2["enrichment"]
    assert result.missing_types == ("reid",) and result.errors == []
    assert DETECTIONS[0]["enrichment"] == {"scene": {"description": "porch", "lighting": "night", "indoor": False}}


FRIGATE_EVENT = "1764554400.123456-ab12cd"
FRIGATE_DETECTIONS = [
    {  # an MQTT `update` of a person on two overlapping zones (core/frigate/mapping.py)
        "detection_id": f"frigate:{FRIGATE_EVENT}:update:1764554405.500000",
        "camera_id": "front_door",
        "ts": T0 + timedelta(seconds=5),
        "label": "person",
        "confidence": 0.87,
        "bbox": [0.42, 0.31, 0.55, 0.88],
        "track_id": FRIGATE_EVENT,
        "zone": "driveway,porch",
        "enrichment": {"frigate": {"source": "mqtt", "type": "update", "current_zones": ["driveway", "porch"]}},
    },
    {  # an /api/events item of the same object
        "detection_id": f"frigate:{FRIGATE_EVENT}:api",
        "camera_id": "front_door",
        "ts": T0,
        "label": "person",
        "confidence": 0.8,
        "bbox": [0.4, 0.3, 0.5, 0.9],
        "track_id": FRIGATE_EVENT,
        "zone": "porch",
        "enrichment": {"frigate": {"source": "api"}},
    },
]


def test_a_frigate_detection_reaches_the_gateway_with_its_box_track_zones_and_media_urls():
    """Issue 40 item 7: what a real vision service needs to find and judge the frames arrives over HTTP; the media
    URLs are Frigate's event API on FRIGATE_URL, and no credential of FRIGATE_URL reaches the gateway."""
    resource = HttpEnrichmentResource(
        gateway_url="", timeout_seconds=5, frigate_url="http://viewer:s3cret@frigate.lan:5000/?token=abc"
    )
    with FakeGateway(ok) as gateway:
        resource = resource.model_copy(update={"gateway_url": gateway.url})
        result = resource.fetch({"batch_id": "b2", "camera_id": "front_door"}, FRIGATE_DETECTIONS, ["florence"])
    [request] = gateway.requests
    first, second = request["body"]["detections"]
    event = f"http://frigate.lan:5000/api/events/{FRIGATE_EVENT}"
    assert first == {
        "detection_id": FRIGATE_DETECTIONS[0]["detection_id"],
        "camera_id": "front_door",
        "ts": (T0 + timedelta(seconds=5)).isoformat(),
        "label": "person",
        "confidence": 0.87,
        "bbox": [0.42, 0.31, 0.55, 0.88],
        "track_id": FRIGATE_EVENT,
        "zones": ["driveway", "porch"],  # every current zone, not the joined text
        "source": {
            "kind": "frigate",
            "event_id": FRIGATE_EVENT,
            "snapshot_url": f"{event}/snapshot.jpg",
            "clip_url": f"{event}/clip.mp4",
            "thumbnail_url": f"{event}/thumbnail.jpg",
        },
    }
    assert second["zones"] == ["porch"] and second["source"]["snapshot_url"] == f"{event}/snapshot.jpg"
    assert "s3cret" not in json.dumps(request) and "token" not in json.dumps(request)
    assert [d["detection_id"] for d in result.detections] == [d["detection_id"] for d in FRIGATE_DETECTIONS]


def test_without_frigate_url_a_frigate_detection_still_names_its_event():
    with FakeGateway(ok) as gateway:
        http_enrichment(gateway.url, 5).fetch(BATCH, FRIGATE_DETECTIONS[:1], ["florence"])
    [request] = gateway.requests
    assert request["body"]["detections"][0]["source"] == {
        "kind": "frigate",
        "event_id": FRIGATE_EVENT,
        "snapshot_url": None,
        "clip_url": None,
        "thumbnail_url": None,
    }


@pytest.mark.parametrize("behaviour", [slow, trickle], ids=["slow", "trickle"])
def test_deadline_holds_and_batch_goes_on(behaviour):
    timeout = 0.8
    with FakeGateway(behaviour) as gateway:
        started = time.monotonic()
        result = http_enrichment(gateway.url, timeout).fetch(BATCH, DETECTIONS, TYPES)
        elapsed = time.monotonic() - started
    assert elapsed < timeout + SLACK_S, f"took {elapsed:.2f} s for a {timeout} s deadline"
    assert elapsed >= timeout * 0.9  # it did wait for the gateway
    assert result.missing_types == tuple(TYPES)
    assert "deadline" in result.errors[0]
    assert result.detections[0]["enrichment"]["scene"]["lighting"] == "night"  # what was ready goes on


def test_failing_gateway_reports_missing_types_quickly():
    with FakeGateway(failing) as gateway:
        started = time.monotonic()
        result = http_enrichment(gateway.url, 5).fetch(BATCH, DETECTIONS, TYPES)
    assert time.monotonic() - started < 2
    assert result.missing_types == tuple(TYPES)
    assert "HTTP 500" in result.errors[0]
    assert [d["detection_id"] for d in result.detections] == ["d1", "d2"]


def test_unreachable_gateway_reports_missing_types():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    result = http_enrichment(f"http://127.0.0.1:{port}", 2).fetch(BATCH, DETECTIONS, ["florence"])
    assert result.missing_types == ("florence",) and "failed" in result.errors[0]


def test_streamed_results_that_are_ready_are_kept_at_the_deadline():
    timeout = 0.8
    with FakeGateway(partial_stream) as gateway:
        started = time.monotonic()
        result = http_enrichment(gateway.url, timeout).fetch(BATCH, DETECTIONS, TYPES)
        elapsed = time.monotonic() - started
    assert elapsed < timeout + SLACK_S
    assert "clip" not in result.missing_types  # finished before the deadline
    assert set(result.missing_types) == set(TYPES) - {"clip"}
    assert result.detections[1]["enrichment"]["clip"] == [{"label": "resident", "score": 0.4}]
    assert result.detections[0]["enrichment"]["florence"]["caption"] == "a man at the door"  # partial, still used
