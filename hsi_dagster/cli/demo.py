"""`hsi demo`: seeded camera activity -> embedded llama.cpp server -> the Dagster pipeline -> a risk report."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hsi_dagster.cli.environment import export, settings_with
from hsi_dagster.settings import EXAMPLE_CAMERAS_PATH, HsiSettings, load_settings
from hsi_dagster.steps import configured_slot_context

DEMO_DB = "data/demo.duckdb"
# (UTC hour, seed) of the two simulated night segments: with seed offset 0 they cover night-time loitering at a
# door, a vehicle break-in, wildlife and passing cars in ~13 batches (SmolLM2 on 2 CPU cores: ~10-25 s each).
DEMO_SEGMENTS = ((21, 7), (23, 11))
DEMO_EVENTS_PER_HOUR = 15


def _frigate_resolutions(settings: HsiSettings, files: Sequence[str], config: str | None) -> dict[str, tuple[int, int]]:
    """Detect resolutions for a Frigate demo (cli/frigate.load_resolutions), after checking the files exist."""
    if not files:
        return {}
    from hsi_dagster.cli.frigate import FrigateUsageError, load_resolutions

    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise FrigateUsageError(f"--frigate: no such file {missing[0]}")
    if all(Path(f).read_bytes()[:64].lstrip().startswith(b"[") for f in files):
        return {}  # /api/events answers: their boxes are relative already
    return load_resolutions(settings, config)


def _server_is_up(url: str, api_key: str | None) -> bool:
    from hsi_dagster.llm.client import LlamaClient, LlamaServerError

    client = LlamaClient(url, api_key=api_key, startup_timeout=1.0, max_tries=1, connect_timeout=1.0)
    try:
        client.server_info()
        return True
    except LlamaServerError:
        return False
    finally:
        client.close()


def run_demo(
    settings: HsiSettings,
    *,
    seed: int = 0,
    minutes: float = 10.0,
    frigate: Sequence[str] = (),
    frigate_config: str | None = None,
) -> int:
    """The demo on simulated detections, or on a recorded Frigate night (`frigate` files, docs/frigate.md)."""
    resolutions = _frigate_resolutions(settings, frigate, frigate_config)  # refused before anything starts
    from hsi_dagster.cli.instance import ensure_dagster_home
    from hsi_dagster.cli.process import process
    from hsi_dagster.cli.report import build_report
    from hsi_dagster.llm.embedded import EmbeddedServerProcess
    from hsi_dagster.llm.model_files import model_path
    from hsi_dagster.storage.db import connect
    from hsi_dagster.storage.ingest import ingest_files
    from hsi_dagster.synthetic.jsonl import write_jsonl
    from hsi_dagster.synthetic.streams import simulate

    started = time.perf_counter()
    settings = settings_with(
        HSI_DUCKDB_PATH=None if os.environ.get("HSI_DUCKDB_PATH") else DEMO_DB,
        CAMERA_CONTEXT_PATH=None if settings.CAMERA_CONTEXT_PATH else str(EXAMPLE_CAMERAS_PATH),
    )
    db = Path(settings.HSI_DUCKDB_PATH)
    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)  # the demo's report covers this run only
    home = ensure_dagster_home()

    yesterday = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    sample = db.parent / f"demo-seed{seed}.jsonl"
    records = [
        record
        for hour, segment_seed in DEMO_SEGMENTS
        for record in simulate(
            segment_seed + seed,
            start=yesterday + timedelta(hours=hour),
            duration_s=minutes * 60,
            events_per_hour=DEMO_EVENTS_PER_HOUR,
        )
    ]
    if frigate:
        print(f"1/4 a recorded Frigate night instead of a simulation: {', '.join(map(str, frigate))}")
    else:
        count = write_jsonl(sample, records)
        print(f"1/4 simulated {count} detections: two {minutes:g}-minute segments of last night -> {sample}")

    server = None
    url = settings.llm_urls[0]
    if _server_is_up(url, settings.api_key):
        print(f"2/4 using the llama.cpp server already at {url}")
    else:
        server = EmbeddedServerProcess(port=settings.LLM_PORT, log_path=str(db.parent / "llama-server.log"))
        server.start()
        export(LLAMA_SERVER_URL=server.url)
        print(
            f"2/4 started the embedded llama.cpp server at {server.url} ({model_path(settings.MODEL_PATH).name}, "
            f"{settings.PARALLEL} slots x {configured_slot_context(settings)} tokens; log {server.log_path})"
        )
    try:
        if frigate:
            from hsi_dagster.storage.frigate import import_frigate_files

            imported = import_frigate_files(str(db), frigate, resolutions=resolutions)
            print("3/4 imported the Frigate night:\n    " + imported.summary().replace("\n", "\n    "))
        else:
            report = ingest_files(str(db), [sample], settings=settings)
            print(f"3/4 ingested: {report.loaded} loaded, {report.quarantined} quarantined")
        print(f"4/4 processing closed batches through Dagster (DAGSTER_HOME={home}) ...", flush=True)
        done = [0]

        def progress(run) -> None:
            done[0] += 1
            mark = "ok" if run.success else f"FAILED: {run.error}"
            print(f"    [{done[0]}] {run.batch_id}: {mark} ({run.seconds:.1f}s)", flush=True)

        result = process(load_settings(), datetime.now(UTC), on_result=progress)
    finally:
        if server is not None:
            server.stop()
    with connect(str(db), read_only=True) as conn:
        print()
        print(build_report(conn, result.batch_ids))
    print()
    print(f"demo finished in {time.perf_counter() - started:.0f}s; {len(result.failed)} failed runs.")
    print("See the runs and the lineage in the Dagster UI:")
    print(
        f"  DAGSTER_HOME={home} HSI_DUCKDB_PATH={db} .venv/bin/dagster dev -w workspace.yaml   # then open http://127.0.0.1:3000"
    )
    return 1 if result.failed else 0
