"""How long the verdict publisher takes to send a backlog (a broker that was down for a while): N stored verdicts over
4 cameras, half of them high (an event each), published by one `publish_pending` call to a local mosquitto, then
the outbox emptied and the same backlog sent again. Prints each run and the median.

    .venv/bin/python bench/mqtt_publish_bench.py [--verdicts 1000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hsi_dagster.resources import HsiDuckDBResource  # noqa: E402
from hsi_dagster.resources.mqtt import MqttPublisherResource  # noqa: E402
from hsi_dagster.sensors.verdict_publisher import publish_pending  # noqa: E402
from hsi_dagster.storage.db import connect  # noqa: E402
from hsi_dagster.storage.pipeline_tables import save_assessment  # noqa: E402
from tests.support.mosquitto import Mosquitto  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verdicts", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        broker = Mosquitto(Path(folder) / "broker")
        broker.start()
        try:
            db = Path(folder) / "hsi.duckdb"
            start = datetime.now(UTC) - timedelta(minutes=50)
            with connect(db) as conn:
                for i in range(args.verdicts):
                    high = i % 2 == 1
                    save_assessment(
                        conn,
                        {
                            "batch_id": f"b{i:06d}",
                            "camera_id": f"cam{i % 4}",
                            "risk_score": 70 if high else 20,
                            "risk_level": "high" if high else "low",
                            "summary": "bench",
                            "status": "ok",
                            "assessed_at": start + timedelta(seconds=i * 2400 / max(args.verdicts, 1)),
                        },
                    )
            database = HsiDuckDBResource(database=str(db))
            mqtt = MqttPublisherResource(enabled=True, port=broker.port)
            took = []
            for run in range(args.runs):
                started = time.monotonic()
                report = publish_pending(database, mqtt, None, limit=args.verdicts)
                took.append(time.monotonic() - started)
                print(f"run {run + 1}: {report.summary()} in {took[-1]:.2f} s", flush=True)
                with connect(db) as conn:
                    conn.execute("DELETE FROM mqtt_outbox")
                    conn.execute("UPDATE mqtt_cameras SET last_window_start = NULL")
            print(f"median {statistics.median(took):.2f} s for {args.verdicts} verdicts")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
