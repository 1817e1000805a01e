"""Records as JSON Lines: one encoding for every synthetic file, written atomically (optionally gzipped)."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def encode_record(record: dict[str, Any] | str | bytes) -> bytes:
    """One JSONL line (without newline): dicts as compact UTF-8 JSON, str/bytes as they are."""
    if isinstance(record, bytes):
        return record
    if isinstance(record, str):
        return record.encode("utf-8", errors="surrogatepass")
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def write_jsonl(path: str | os.PathLike[str], records: Iterable[dict[str, Any] | str | bytes]) -> int:
    """Write records as JSON Lines atomically (temp file + rename); `.gz` paths are gzipped. Returns the count.

    Output is byte-identical for identical records (the gzip header carries no timestamp or name).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    count = 0
    try:
        with os.fdopen(fd, "wb") as raw:
            sink: Any = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if target.suffix == ".gz" else raw
            buffer: list[bytes] = []
            for record in records:
                buffer.append(encode_record(record))
                count += 1
                if len(buffer) >= 4096:
                    sink.write(b"\n".join(buffer) + b"\n")
                    buffer.clear()
            if buffer:
                sink.write(b"\n".join(buffer) + b"\n")
            if sink is not raw:
                sink.close()
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count
