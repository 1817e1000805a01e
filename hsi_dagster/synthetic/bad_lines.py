"""Deliberately invalid detection lines, each naming the field its rejection must name (quarantine tests and
benchmarks)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, NamedTuple

from hsi_dagster.synthetic.jsonl import encode_record
from hsi_dagster.synthetic.streams import DEFAULT_CAMERAS


class BadLine(NamedTuple):
    """A deliberately invalid line: what kind of fault, the field its rejection must name, the bytes."""

    kind: str
    field: str
    line: bytes


def bad_lines(seed: int, n: int) -> list[BadLine]:
    """`n` invalid lines cycling through many kinds of fault (shuffled by `seed`), each with the field its
    rejection reason must name. For tests and benchmarks of the quarantine path."""
    rng = random.Random(f"hsi-bad-lines|{seed}")
    kinds = list(BAD_KINDS)
    out: list[BadLine] = []
    for i in range(n):
        if i % len(kinds) == 0:
            rng.shuffle(kinds)
        kind = kinds[i % len(kinds)]
        base = {
            "detection_id": f"bad-{seed}-{i:07d}",
            "camera_id": rng.choice(DEFAULT_CAMERAS),
            "ts": f"2026-12-01T02:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z",
            "label": rng.choice(["person", "car", "dog"]),
            "confidence": round(rng.uniform(0.1, 0.99), 3),
            "bbox": [0.1, 0.2, 0.3, 0.6],
            "track_id": f"trk-{i}",
        }
        field_name, line = BAD_KINDS[kind](base, rng)
        out.append(BadLine(kind, field_name, line))
    return out


def _with(**changes: Any) -> Callable[[dict[str, Any], random.Random], bytes]:
    def make(base: dict[str, Any], rng: random.Random) -> bytes:
        record = dict(base)
        for key, value in changes.items():
            if value is _MISSING:
                record.pop(key, None)
            else:
                record[key] = value
        return encode_record(record)

    return make


_MISSING = object()


def _raw_field(field_name: str, literal: str) -> Callable[[dict[str, Any], random.Random], bytes]:
    def make(base: dict[str, Any], rng: random.Random) -> bytes:
        text = encode_record(dict(base, **{field_name: "@@"})).decode()
        return text.replace('"@@"', literal).encode()

    return make


def _f(field_name: str, maker: Callable[[dict[str, Any], random.Random], bytes]):
    return lambda base, rng: (field_name, maker(base, rng))


BAD_KINDS: dict[str, Callable[[dict[str, Any], random.Random], tuple[str, bytes]]] = {
    "truncated_json": lambda b, r: ("line", encode_record(b)[: r.randint(5, 40)]),
    "not_json": lambda b, r: ("line", b"camera=front_door label=person conf=0.9"),
    "json_array": lambda b, r: ("line", b"[" + encode_record(b) + b"]"),
    "json_string": lambda b, r: ("line", b'"just a string"'),
    "trailing_comma": lambda b, r: ("line", encode_record(b)[:-1] + b",}"),
    "duplicate_key": lambda b, r: ("confidence", encode_record(b)[:-1] + b',"confidence":0.5}'),
    "invalid_utf8": lambda b, r: (
        "line",
        encode_record(b)
        .replace(b'"person"', b'"pers\xff\xfeon"')
        .replace(b'"car"', b'"c\xffar"')
        .replace(b'"dog"', b'"d\xc3og"'),
    ),
    "control_char": lambda b, r: ("line", encode_record(b).replace(b'"trk-', b'"tr\x01k-')),
    "huge_line": lambda b, r: ("line", encode_record(dict(b, enrichment={"florence": {"caption": "x" * (1 << 20)}}))),
    "missing_detection_id": _f("detection_id", _with(detection_id=_MISSING)),
    "missing_camera_id": _f("camera_id", _with(camera_id=_MISSING)),
    "missing_ts": _f("ts", _with(ts=_MISSING)),
    "missing_label": _f("label", _with(label=_MISSING)),
    "missing_confidence": _f("confidence", _with(confidence=_MISSING)),
    "null_label": _f("label", _with(label=None)),
    "empty_detection_id": _f("detection_id", _with(detection_id="")),
    "long_detection_id": _f("detection_id", _with(detection_id="x" * 129)),
    "numeric_detection_id": _f("detection_id", _with(detection_id=12345)),
    "camera_id_slash": _f("camera_id", _with(camera_id="front/door")),
    "camera_id_space": _f("camera_id", _with(camera_id="front door")),
    "camera_id_long": _f("camera_id", _with(camera_id="c" * 65)),
    "ts_naive": _f("ts", _with(ts="2026-12-01T02:14:05.120")),
    "ts_words": _f("ts", _with(ts="yesterday at noon")),
    "ts_epoch_number": _f("ts", _with(ts=1796090045)),
    "ts_feb_30": _f("ts", _with(ts="2026-02-30T02:14:05Z")),
    "ts_bad_offset": _f("ts", _with(ts="2026-12-01T02:14:05+25:00")),
    "ts_year_1900": _f("ts", _with(ts="1900-01-01T00:00:00Z")),
    "label_long": _f("label", _with(label="l" * 65)),
    "label_number": _f("label", _with(label=7)),
    "confidence_string": _f("confidence", _with(confidence="0.9")),
    "confidence_bool": _f("confidence", _with(confidence=True)),
    "confidence_high": _f("confidence", _with(confidence=1.7)),
    "confidence_negative": _f("confidence", _with(confidence=-0.1)),
    "confidence_nan": _f("confidence", _raw_field("confidence", "NaN")),
    "confidence_infinity": _f("confidence", _raw_field("confidence", "Infinity")),
    "confidence_overflow": _f("confidence", _raw_field("confidence", "1e400")),
    "bbox_reversed_x": _f("bbox", _with(bbox=[0.6, 0.2, 0.3, 0.6])),
    "bbox_reversed_y": _f("bbox", _with(bbox=[0.1, 0.7, 0.3, 0.6])),
    "bbox_three_values": _f("bbox", _with(bbox=[0.1, 0.2, 0.3])),
    "bbox_out_of_range": _f("bbox", _with(bbox=[0.1, 0.2, 1.3, 0.6])),
    "bbox_string": _f("bbox", _with(bbox="0.1,0.2,0.3,0.6")),
    "track_id_number": _f("track_id", _with(track_id=17)),
    "zone_empty": _f("zone", _with(zone="")),
    "enrichment_list": _f("enrichment", _with(enrichment=["florence"])),
    "clip_not_list": _f("enrichment.clip", _with(enrichment={"clip": {"label": "a dog", "score": 0.9}})),
    "clip_score_high": _f(
        "enrichment.clip[1].score",
        _with(enrichment={"clip": [{"label": "a", "score": 0.5}, {"label": "b", "score": 1.5}]}),
    ),
    "lighting_unknown": _f("enrichment.scene.lighting", _with(enrichment={"scene": {"lighting": "noon"}})),
    # Over a bound, optional enrichment is cut and the detection kept (contract section 6): not a bad line. Over the
    # bound of an identifier it still is.
    "track_id_long": _f("track_id", _with(track_id="t" * 129)),
    "reid_known_string": _f(
        "enrichment.reid.known", _with(enrichment={"reid": {"identity": "resident:alex", "known": "yes"}})
    ),
    "depth_negative": _f("enrichment.depth.distance_m", _with(enrichment={"depth": {"distance_m": -2}})),
    "region_bbox_reversed": _f(
        "enrichment.florence.regions[0].bbox",
        _with(enrichment={"florence": {"regions": [{"label": "door", "bbox": [0.9, 0.1, 0.2, 0.5]}]}}),
    ),
    "zone_long": _f("zone", _with(zone="z" * 129)),
}
