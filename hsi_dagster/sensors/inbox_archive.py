"""What becomes of an inbox file once it is loaded: moved to `<inbox>/.processed/` and deleted there after
INBOX_RETENTION_HOURS (0 = deleted at once), so that neither the inbox listing nor inbox_sensor's cursor (one entry
per file in the inbox) grows with every file a writer ever dropped (a writer that collects one second of detections
per file drops 86,400 files a day).

A file leaves the inbox only once `ingested_files` records it with the size and mtime it has at that moment: loaded
to its end, by the tick or by an ingest_job run (the caller checks, `storage.ingest.already_ingested`). A file that
failed to load stays where it is, named in the log. A file that reappears under the same name is a new version
(another size or mtime) and is loaded like any new file; its archived namesake is replaced.

The archived copy keeps its name and mtime (so a copy moved back into the inbox is recognised as already loaded);
its age is counted from the move (the inode change time, which the rename sets).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

PROCESSED_DIR = ".processed"


def archived_path(path: Path) -> Path:
    """Where a loaded inbox file is kept during the retention."""
    return path.parent / PROCESSED_DIR / path.name


def where_now(path: Path) -> Path:
    """The inbox file at `path`, or its archived copy once it has been moved (for readers that follow a file)."""
    return path if path.exists() else archived_path(path)


def retire(path: Path, retention_hours: float) -> None:
    """Take a loaded file out of the inbox: archived, or deleted when the retention is 0. OSError when it cannot be
    (the caller logs it and tries again at the next tick)."""
    if retention_hours <= 0:
        path.unlink(missing_ok=True)
        return
    target = archived_path(path)
    target.parent.mkdir(exist_ok=True)
    os.replace(path, target)


def prune_archive(inbox: Path, retention_hours: float, now: float | None = None) -> list[str]:
    """Delete the archived files older than the retention (counted from their move); returns their names."""
    folder = inbox / PROCESSED_DIR
    if not folder.is_dir():
        return []
    cutoff = (time.time() if now is None else now) - retention_hours * 3600
    pruned = []
    with os.scandir(folder) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):  # gone meanwhile, or not ours to delete: tried again next time
                stat = entry.stat(follow_symlinks=False)
                if entry.is_file(follow_symlinks=False) and max(stat.st_ctime, stat.st_mtime) < cutoff:
                    os.unlink(entry.path)
                    pruned.append(entry.name)
    return sorted(pruned)
