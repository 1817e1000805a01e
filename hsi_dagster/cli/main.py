"""`hsi`: the command line of hsi-dagster (contract section 4).

Every command reads `.env` (pydantic-settings), takes the database from HSI_DUCKDB_PATH or `--db FILE`, and exits
non-zero with a one-line message on bad arguments or unreadable input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hsi_dagster.cli.errors import UsageError


def parse_timestamp(text: str) -> datetime:
    """RFC 3339 with an offset (as in the contract); `now` is accepted."""
    if text == "now":
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--as-of {text!r}: not an RFC 3339 timestamp with an offset (e.g. 2026-12-01T02:14:05Z)"
        ) from None
    if value.tzinfo is None:
        raise UsageError(f"--as-of {text!r}: the timestamp needs an offset (Z or +HH:MM)")
    return value.astimezone(UTC)


def _settings(args: argparse.Namespace):
    from hsi_dagster.cli.environment import settings_with

    return settings_with(HSI_DUCKDB_PATH=getattr(args, "db", None) or None)  # --db: for the workers too


# ----------------------------------------------------------------------------------------------- commands
def cmd_ingest(args: argparse.Namespace) -> int:
    from hsi_dagster.storage.ingest import IngestError, ingest_files

    settings = _settings(args)
    try:
        report = ingest_files(settings.HSI_DUCKDB_PATH, args.paths, settings=settings)
    except IngestError as exc:
        raise UsageError(str(exc)) from None
    print(report.summary())
    added = register_closed_batches(settings, datetime.now(UTC))
    if added:
        print(f"{added} closed batches registered as Dagster partitions (see `hsi batches`)")
    return 0


def register_closed_batches(settings, as_of: datetime) -> int:
    """Add the batches closed as of `as_of` as dynamic partitions, so `dagster asset materialize --partition` and
    the UI find them right after ingest, not only once the sensor or `hsi process` ran. Returns how many were new."""
    from hsi_dagster.cli.instance import get_instance
    from hsi_dagster.core.intake.batching import BatchRules
    from hsi_dagster.partitions import BATCH_PARTITIONS_NAME
    from hsi_dagster.storage.batches import pending_closed_batches
    from hsi_dagster.storage.db import connect

    with connect(settings.HSI_DUCKDB_PATH, read_only=True) as conn:
        batch_ids = [b.batch_id for b in pending_closed_batches(conn, BatchRules.from_settings(settings), as_of)]
    if not batch_ids:
        return 0
    instance = get_instance(settings)
    existing = set(instance.get_dynamic_partitions(BATCH_PARTITIONS_NAME))
    new = [key for key in batch_ids if key not in existing]
    instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, new)
    return len(new)


def cmd_batches(args: argparse.Namespace) -> int:
    from hsi_dagster.core.intake.batching import BatchRules
    from hsi_dagster.storage.batches import list_batches
    from hsi_dagster.storage.db import connect

    settings = _settings(args)
    as_of = parse_timestamp(args.as_of) if args.as_of else datetime.now(UTC)
    if not Path(settings.HSI_DUCKDB_PATH).exists():
        raise UsageError(f"no database at {settings.HSI_DUCKDB_PATH}: run `hsi ingest` first")
    with connect(settings.HSI_DUCKDB_PATH, read_only=True) as conn:
        rows = list_batches(conn, BatchRules.from_settings(settings), as_of)
    for row in rows:
        if args.json:
            print(json.dumps(row, default=_json_default, ensure_ascii=False))
        else:
            print(
                f"{row['batch_id']}  {row['camera_id']:<14} {_iso(row['started_at'])} -> {_iso(row['closes_at'])}"
                f"  {row['close_reason']:<9} {len(row['detection_ids'])} detections"
            )
    if not args.json:
        closed = [row["batch_id"] for row in rows if row["state"] != "open"]
        if closed:
            print(materialize_hint(closed[0]))
        print(f"{len(rows)} batches as of {as_of.isoformat()}")
    return 0


def materialize_hint(batch_id: str) -> str:
    """The command that materializes one batch partition from the Dagster CLI, ready to paste (#16)."""
    return (
        "batch_id = Dagster partition key (closed batches are registered by `hsi ingest`, the batch sensor or "
        "`hsi process`); materialize the first with:\n"
        f"  dagster asset materialize -m hsi_dagster.definitions --select group:pipeline --partition {batch_id}"
    )


def cmd_process(args: argparse.Namespace) -> int:
    from hsi_dagster.cli.process import process

    settings = _settings(args)
    as_of = parse_timestamp(args.as_of) if args.as_of else datetime.now(UTC)

    def show(run) -> None:
        state = "ok" if run.success else f"FAILED: {run.error}"
        print(f"  {run.batch_id}: {state} ({run.seconds:.1f}s, run {run.run_id[:8]})", flush=True)

    print(f"processing batches closed as of {as_of.isoformat()} (DAGSTER_HOME={os.environ.get('DAGSTER_HOME', '')})")
    from hsi_dagster.cli.process import AlreadyRunning, NoLlamaServer

    try:
        report = process(settings, as_of, workers=args.workers, on_result=show)
    except AlreadyRunning as exc:
        raise UsageError(str(exc)) from None
    except NoLlamaServer as exc:
        print(f"hsi process: {exc}", file=sys.stderr)
        return 3
    print(f"{len(report.runs)} runs, {len(report.failed)} failed, in {report.seconds:.1f}s")
    if report.running_elsewhere:
        print(f"{len(report.running_elsewhere)} batches have a run queued or going elsewhere: left to it")
    if report.waiting:
        due = datetime.fromtimestamp(min(report.waiting.values()), UTC).isoformat(timespec="seconds")
        print(f"{len(report.waiting)} failed batches wait out their back-off (the first until {due})")
    if report.abandoned:
        print(
            f"{len(report.abandoned)} batches given up after repeated failed runs (see their runs): "
            + ", ".join(report.abandoned[:5])
            + (" ..." if len(report.abandoned) > 5 else ""),
            file=sys.stderr,
        )
    if report.failed:
        print("failed batches are tried again after a back-off: run `hsi process` again later", file=sys.stderr)
    return 1 if report.failed or report.abandoned else 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from hsi_dagster.synthetic.jsonl import write_jsonl
    from hsi_dagster.synthetic.live import simulate_live
    from hsi_dagster.synthetic.streams import simulate

    if args.live:
        activity = parse_timestamp(args.activity_start) if args.activity_start else None
        files = simulate_live(args.inbox, args.rate, args.seconds, args.seed, activity_start=activity)
        print(f"wrote {len(files)} files into {args.inbox}")
        return 0
    start = parse_timestamp(args.start) if args.start else datetime.now(UTC) - timedelta(minutes=args.minutes + 5)
    count = write_jsonl(
        args.out, simulate(args.seed, start=start, duration_s=args.minutes * 60, events_per_hour=args.events_per_hour)
    )
    print(f"wrote {count} detections to {args.out}")
    return 0


def cmd_llm_serve(args: argparse.Namespace) -> int:
    from hsi_dagster.cli.environment import settings_with
    from hsi_dagster.llm.embedded import serve

    port = str(args.port) if args.port is not None else None
    serve(settings_with(LLM_HOST=args.host, LLM_PORT=port))  # flags over hsi.env/environment
    return 0


def cmd_llm_calibrate(args: argparse.Namespace) -> int:
    """cl100k estimates vs the served model's exact counts (/apply-template + /tokenize) over generated prompts."""
    from hsi_dagster.core.prompt.tokens import TokenCounter
    from hsi_dagster.llm.calibration import RATIO_HEADROOM, calibrate
    from hsi_dagster.llm.client import LlamaClient
    from hsi_dagster.synthetic.batches import calibration_prompts

    settings = _settings(args)
    with LlamaClient(settings.llm_urls[0], api_key=settings.api_key, startup_timeout=30) as client:
        client.wait_until_ready()
        report = calibrate(client.count_prompt_tokens, calibration_prompts(args.samples), TokenCounter())
    suggested = round(report.max_ratio * RATIO_HEADROOM + 0.005, 2)
    print(
        f"{len(report.rows)} prompts: served tokens / cl100k estimate: median {report.median_ratio:.3f}, "
        f"max {report.max_ratio:.3f}"
    )
    print(
        f"set PROMPT_TOKEN_RATIO={suggested} in hsi.env (max ratio + {RATIO_HEADROOM - 1:.0%} headroom); "
        f"now {settings.PROMPT_TOKEN_RATIO}"
    )
    return 0


def cmd_llm_sweep(args: argparse.Namespace) -> int:
    from hsi_dagster.cli.llm_sweep import run_sweep

    return run_sweep(args)


def cmd_plan(args: argparse.Namespace) -> int:
    from hsi_dagster.cli.plan import run_plan

    return run_plan(args)


def cmd_config_check(args: argparse.Namespace) -> int:
    from hsi_dagster.cli.config_check import run_config_check

    return run_config_check(args)


def cmd_metrics_serve(args: argparse.Namespace) -> int:
    from hsi_dagster.cli.metrics import serve
    from hsi_dagster.core.intake.batching import BatchRules

    settings = _settings(args)
    serve(settings.HSI_DUCKDB_PATH, BatchRules.from_settings(settings), host=args.host, port=args.port)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from hsi_dagster.cli.demo import run_demo
    from hsi_dagster.cli.frigate import FrigateUsageError

    try:
        return run_demo(
            _settings(args),
            seed=args.seed,
            minutes=args.minutes,
            frigate=args.frigate or (),
            frigate_config=args.frigate_config,
        )
    except FrigateUsageError as exc:
        raise UsageError(str(exc)) from None


def cmd_eval(args: argparse.Namespace) -> int:
    from hsi_dagster.cli.eval import run_eval

    return run_eval(args, _settings(args))


def cmd_frigate(args: argparse.Namespace) -> int:
    from hsi_dagster.cli.frigate import FrigateUsageError

    try:
        return args.frigate_func(args, _settings(args))
    except FrigateUsageError as exc:
        raise UsageError(str(exc)) from None


def cmd_mqtt(args: argparse.Namespace) -> int:
    return int(args.mqtt_func(args, _settings(args)))


def cmd_corrections(args: argparse.Namespace) -> int:
    return int(args.corrections_func(args, _settings(args)))


# ----------------------------------------------------------------------------------------------- plumbing
def _iso(value) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _json_default(value):
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hsi", description="Home security intelligence on Dagster")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_db(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--db", metavar="FILE", help="DuckDB file (default: HSI_DUCKDB_PATH)")
        return p

    p = with_db(sub.add_parser("ingest", help="validate and load detection files (JSON Lines)"))
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.set_defaults(func=cmd_ingest)

    p = with_db(sub.add_parser("batches", help="list batch windows as of a time, without processing them"))
    p.add_argument("--as-of", metavar="TIMESTAMP")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_batches)

    p = with_db(sub.add_parser("process", help="run the Dagster pipeline for every batch closed as of a time"))
    p.add_argument("--as-of", metavar="TIMESTAMP")
    p.add_argument("--workers", type=int, help="worker processes (default PARALLEL)")
    p.set_defaults(func=cmd_process)

    p = sub.add_parser("simulate", help="write a seeded multi-camera detection stream")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default="data/simulated.jsonl")
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--events-per-hour", type=float, default=40.0)
    p.add_argument("--start", metavar="TIMESTAMP", help="first timestamp (default: minutes + 5 ago)")
    p.add_argument("--live", action="store_true", help="write files into --inbox in real time")
    p.add_argument("--inbox", default="data/inbox")
    p.add_argument("--rate", type=float, default=2.0, help="detections per second (live)")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to run (live)")
    p.add_argument(
        "--activity-start",
        metavar="TIMESTAMP",
        help="play the activity simulated from this moment, timestamps moved to now (live; a reproducible stream)",
    )
    p.set_defaults(func=cmd_simulate)

    llm = sub.add_parser("llm", help="the llama.cpp server").add_subparsers(dest="llm_command", required=True)
    p = llm.add_parser("serve", help="run llama.cpp's server from the xllamacpp wheel on 127.0.0.1:LLM_PORT")
    p.add_argument("--host", help="address to bind (default LLM_HOST, 127.0.0.1; 0.0.0.0 only inside a container)")
    p.add_argument("--port", type=int, help="port to bind (default LLM_PORT)")
    p.set_defaults(func=cmd_llm_serve)
    p = llm.add_parser("calibrate", help="cl100k_base estimates vs the served model's exact token counts")
    p.add_argument("--samples", type=int, default=20)
    p.set_defaults(func=cmd_llm_calibrate)
    from hsi_dagster.cli.llm_sweep import add_sweep_arguments

    p = llm.add_parser(
        "sweep",
        help="server configurations side by side on the labeled prompts: speed, memory, quality, what to switch to",
    )
    add_sweep_arguments(p)
    p.set_defaults(func=cmd_llm_sweep)

    from hsi_dagster.cli.config_check import add_config_check_arguments
    from hsi_dagster.cli.plan import add_plan_arguments

    p = sub.add_parser("plan", help="capacity planner: does the model fit the GPU with these settings?")
    add_plan_arguments(p)
    p.set_defaults(func=cmd_plan)
    config = sub.add_parser("config", help="configuration").add_subparsers(dest="config_command", required=True)
    p = config.add_parser("check", help="flag inconsistent settings (hsi.env and the environment)")
    add_config_check_arguments(p)
    p.set_defaults(func=cmd_config_check)

    metrics = sub.add_parser("metrics", help="Prometheus metrics").add_subparsers(dest="metrics_command", required=True)
    p = with_db(metrics.add_parser("serve", help="serve pipeline metrics from DuckDB on 127.0.0.1"))
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 only inside a container network)")
    p.add_argument("--port", type=int, default=9464, help="port to bind (0 = any free port)")
    p.set_defaults(func=cmd_metrics_serve)

    p = with_db(sub.add_parser("demo", help="sample detections -> embedded server -> pipeline -> risk report"))
    p.add_argument("--seed", type=int, default=0, help="offset added to the demo's scenario seeds")
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of simulated activity per segment")
    p.add_argument("--frigate", nargs="+", metavar="FILE", help="run on a recorded Frigate night instead")
    p.add_argument("--frigate-config", metavar="CONFIG", help="Frigate's config.yml for --frigate")
    p.set_defaults(func=cmd_demo)

    from hsi_dagster.cli.eval import add_eval_arguments

    p = with_db(sub.add_parser("eval", help="labeled scenarios on endpoints/quality levels -> report and charts"))
    add_eval_arguments(p)
    p.set_defaults(func=cmd_eval)

    from hsi_dagster.cli.frigate import add_frigate_parser

    add_frigate_parser(sub, with_db)
    sub.choices["frigate"].set_defaults(func=cmd_frigate)

    from hsi_dagster.cli.mqtt import add_mqtt_parser

    add_mqtt_parser(sub, with_db)
    sub.choices["mqtt"].set_defaults(func=cmd_mqtt)

    from hsi_dagster.cli.corrections import add_corrections_parser

    add_corrections_parser(sub, with_db)
    sub.choices["correct"].set_defaults(func=cmd_corrections)
    sub.choices["corrections"].set_defaults(func=cmd_corrections)
    sub.choices["exceptions"].set_defaults(func=cmd_corrections)
    return parser


def main(argv: list[str] | None = None) -> int:
    from hsi_dagster.settings import SettingsError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UsageError, SettingsError) as exc:
        print(f"hsi {args.command}: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"hsi {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
