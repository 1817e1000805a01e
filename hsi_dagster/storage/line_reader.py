"""Detection input cut into numbered lines and checked, without DuckDB: the reader side of `storage.ingest`.

A file is read block by block (never whole; a line too long to be a record is skipped without being held), its
lines gathered into chunks, and each chunk checked with `core.intake.fast_check` (msgspec, in C). The lines the fast
check refuses go to `core.intake.detections.validate_record`, the authoritative validator, which accepts them after all
or rejects them with the reason naming the field. The fast check is stricter than the validator, so both always agree
on what is loaded (tests/storage/test_ingest.py fuzzes this), and reasons come from one place.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from hsi_dagster.core.intake.detections import DEFAULT_BOUNDS, Bounds, Detection, Rejection, validate_record
from hsi_dagster.core.intake.fast_check import fast_check

CHUNK_BYTES = 160 << 20
READ_BLOCK_BYTES = 4 << 20


@dataclass
class CheckedChunk:
    """A chunk after the checks that need Python (done on the reader thread): ready for DuckDB."""

    lines: list[bytes]
    line_nos: np.ndarray
    columns: dict[str, np.ndarray]  # the lines the fast check accepted: line_no, pos (index into lines), line (str)
    rescued: list[tuple[int, Detection]]  # refused by the fast check, accepted by the validator
    rejects: list[Rejection]
    blank: int


def validate_refused(
    lines: list[bytes],
    line_nos: np.ndarray,
    indices: Iterable[int],
    source: str,
    rescued: list[tuple[int, Detection]],
    rejects: list[Rejection],
    bounds: Bounds = DEFAULT_BOUNDS,
) -> None:
    """The authoritative validator decides on each line a fast check refused: loaded after all (cut to the bounds
    where its optional enrichment is over one), or quarantined with the reason naming the field."""
    for index in indices:
        line_no = int(line_nos[index])
        result = validate_record(lines[index], source=source, line_no=line_no, bounds=bounds)
        if isinstance(result, Detection):
            rescued.append((line_no, result))
        else:
            rejects.append(result)


def check_chunk(line_nos: np.ndarray, lines: list[bytes], source: str, bounds: Bounds = DEFAULT_BOUNDS) -> CheckedChunk:
    """Fast check, then the authoritative validator on every line the fast check did not accept."""
    fast = fast_check(lines, bounds)
    # As str: DuckDB copies str objects ~3x faster than bytes. msgspec decoded every string of an accepted line,
    # so it is valid UTF-8; if one were not, the validator would have the last word on it.
    texts: list[str] = []
    kept: list[int] = []
    for index in fast.accepted_at:
        try:
            texts.append(lines[index].decode("utf-8"))
            kept.append(index)
        except UnicodeDecodeError:  # pragma: no cover - see above
            fast.refused_at.append(index)
    rescued: list[tuple[int, Detection]] = []
    rejects: list[Rejection] = []
    validate_refused(lines, line_nos, fast.refused_at, source, rescued, rejects, bounds)
    pos = np.array(kept, dtype=np.int64)
    accepted = np.empty(len(kept), dtype=object)
    accepted[:] = texts
    columns = {"line_no": line_nos[pos], "pos": pos, "line": accepted}
    return CheckedChunk(lines, line_nos, columns, rescued, rejects, len(fast.blank_at))


class Chunker:
    """Gathers lines into chunks of about `chunk_lines`, checks each (see check_chunk) and hands it on."""

    def __init__(
        self,
        source: str,
        chunk_lines: int,
        on_chunk: Callable[[CheckedChunk], object],
        bounds: Bounds = DEFAULT_BOUNDS,
    ) -> None:
        self.source = source
        self.bounds = bounds
        self.chunk_lines = chunk_lines
        self.on_chunk = on_chunk
        self.nos: list[np.ndarray] = []
        self.lines: list[bytes] = []
        self.size = 0

    def add(self, nos: np.ndarray, lines: list[bytes]) -> None:
        """Lines with their line numbers."""
        self.nos.append(nos)
        self.lines.extend(lines)
        self.size += sum(map(len, lines))
        if len(self.lines) >= self.chunk_lines or self.size >= CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            self.on_chunk(check_chunk(np.concatenate(self.nos), self.lines, self.source, self.bounds))
        self.nos, self.lines, self.size = [], [], 0


GZIP_HEADER = b"\x1f\x8b\x08"  # ID1 ID2 CM=deflate (RFC 1952)


@contextmanager
def open_binary(path: Path) -> Iterator[BinaryIO]:
    """The file's bytes, gunzipped when it starts with gzip's header (whatever its name): the magic and deflate, the
    only method gzip defines. A text file whose first bytes happen to be 1f 8b is read as text, its line judged by
    the validator, not refused as a corrupt archive."""
    with open(path, "rb") as raw:
        if raw.peek(3)[:3] == GZIP_HEADER:
            with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                yield unzipped  # type: ignore[misc]
        else:
            yield raw


@dataclass
class LongLine:
    line_no: int
    head: bytes
    size: int


def read_blocks(
    stream: BinaryIO, block_bytes: int, line_bytes: int = DEFAULT_BOUNDS.line_bytes
) -> Iterator[tuple[int, list[bytes]] | LongLine]:
    """Yield (first line number, complete lines) per block, or a LongLine for a line over `line_bytes` so long
    that only its head is kept: the rest is skipped without being held in memory. Memory stays around one block
    (or one line, if the bound is larger)."""
    line_no = 1
    carry = b""
    long_line: LongLine | None = None
    while True:
        block = stream.read(block_bytes)
        if not block:
            break
        if long_line is not None:
            cut = block.find(b"\n")
            if cut < 0:
                long_line.size += len(block)
                continue
            long_line.size += cut
            yield long_line
            long_line = None
            line_no += 1
            block = block[cut + 1 :]
        data = carry + block if carry else block
        last = data.rfind(b"\n")
        if last < 0:
            carry = data
        else:
            lines = data[:last].split(b"\n")
            carry = data[last + 1 :]
            yield line_no, lines
            line_no += len(lines)
        if len(carry) > line_bytes + 1:
            long_line, carry = LongLine(line_no, carry[: 4 * 4096], len(carry)), b""
    if long_line is not None:
        yield long_line
    elif carry:
        yield line_no, [carry]
