"""DuckDB tables of the data contract (section 3), created by idempotent, versioned migrations.

Each migration runs once per database file, inside a transaction, and is recorded in `schema_migrations`.
Add a migration by appending to MIGRATIONS; never edit one that has shipped.
"""

from __future__ import annotations

import duckdb


def added_columns(table: str, **columns: str) -> str:
    """`ALTER TABLE ... ADD COLUMN IF NOT EXISTS` for each column (name=SQL type): a migration's new columns,
    idempotent like every statement here."""
    return "".join(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {kind};\n" for name, kind in columns.items())


MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "contract tables",
        """
        CREATE TABLE IF NOT EXISTS detections (
            detection_id VARCHAR PRIMARY KEY,
            camera_id VARCHAR NOT NULL,
            ts TIMESTAMPTZ NOT NULL,
            label VARCHAR NOT NULL,
            confidence DOUBLE NOT NULL,
            bbox DOUBLE[],
            track_id VARCHAR,
            zone VARCHAR,
            enrichment JSON,
            source VARCHAR,
            line_no BIGINT,
            ingested_at TIMESTAMPTZ NOT NULL,
            batch_id VARCHAR,
            is_late BOOLEAN NOT NULL DEFAULT FALSE
        );
        CREATE INDEX IF NOT EXISTS detections_camera_ts ON detections (camera_id, ts);
        CREATE TABLE IF NOT EXISTS quarantine (
            source VARCHAR NOT NULL,
            line_no BIGINT NOT NULL,
            raw VARCHAR,
            reason VARCHAR NOT NULL,
            received_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (source, line_no)
        );
        CREATE TABLE IF NOT EXISTS detection_batches (
            batch_id VARCHAR PRIMARY KEY,
            camera_id VARCHAR NOT NULL,
            started_at TIMESTAMPTZ NOT NULL,
            last_ts TIMESTAMPTZ NOT NULL,
            closes_at TIMESTAMPTZ NOT NULL,
            close_reason VARCHAR NOT NULL,
            detection_count INTEGER NOT NULL,
            detection_ids VARCHAR[] NOT NULL,
            labels VARCHAR[],
            has_late BOOLEAN NOT NULL DEFAULT FALSE,
            recorded_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS enriched_contexts (
            batch_id VARCHAR PRIMARY KEY,
            context JSON NOT NULL,
            quality_level VARCHAR NOT NULL,
            missing_enrichment VARCHAR[] NOT NULL,
            created_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS budgeted_prompts (
            batch_id VARCHAR PRIMARY KEY,
            messages JSON NOT NULL,
            prompt_tokens_estimate INTEGER NOT NULL,
            tokens_before INTEGER,
            context_budget INTEGER NOT NULL,
            budget_source VARCHAR NOT NULL,
            context_utilization DOUBLE,
            sections_removed VARCHAR[] NOT NULL,
            static_prefix_sha256 VARCHAR,
            created_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS risk_assessments (
            batch_id VARCHAR PRIMARY KEY,
            camera_id VARCHAR NOT NULL,
            risk_score INTEGER,
            risk_level VARCHAR,
            model_risk_level VARCHAR,
            summary VARCHAR,
            reasoning VARCHAR,
            assessment JSON,
            raw_output VARCHAR,
            status VARCHAR NOT NULL,
            error VARCHAR,
            model VARCHAR,
            prompt_tokens INTEGER,
            completion_tokens INTEGER,
            cached_tokens INTEGER,
            context_budget INTEGER,
            context_utilization DOUBLE,
            sections_removed VARCHAR[],
            latency_ms DOUBLE,
            prompt_sha256 VARCHAR,
            assessed_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS alerts (
            alert_id VARCHAR PRIMARY KEY,
            batch_id VARCHAR NOT NULL,
            camera_id VARCHAR NOT NULL,
            risk_level VARCHAR,
            risk_score INTEGER,
            summary VARCHAR,
            kind VARCHAR NOT NULL,
            webhook_status VARCHAR,
            created_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS ingested_files (
            path VARCHAR PRIMARY KEY,
            size BIGINT NOT NULL,
            mtime_ns BIGINT NOT NULL,
            loaded INTEGER NOT NULL,
            quarantined INTEGER NOT NULL,
            ingested_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    (
        2,
        "drop the (camera_id, ts) index",
        # DuckDB's ART indexes serve point lookups only; the range reads by camera and time use zone maps. The
        # index cost ~5 % of every bulk insert and sped up nothing (bench/batch_query_bench.py, bench/ingest_bench.py).
        "DROP INDEX IF EXISTS detections_camera_ts;",
    ),
    (
        3,
        "frigate input state",
        # storage/frigate.py: the last state of each Frigate tracked object (a GenAI description needs its label and
        # time), and per live source (MQTT broker, HTTP API) the message count that numbers its lines and its tallies.
        """
        CREATE TABLE IF NOT EXISTS frigate_tracks (
            track_id VARCHAR PRIMARY KEY,
            camera_id VARCHAR NOT NULL,
            label VARCHAR NOT NULL,
            confidence DOUBLE NOT NULL,
            last_seen DOUBLE NOT NULL
        );
        CREATE TABLE IF NOT EXISTS frigate_sources (
            source VARCHAR PRIMARY KEY,
            messages BIGINT NOT NULL,
            detections BIGINT NOT NULL,
            duplicates BIGINT NOT NULL,
            false_positives BIGINT NOT NULL,
            unchanged BIGINT NOT NULL,
            ignored BIGINT NOT NULL,
            quarantined BIGINT NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    (
        4,
        "evaluation tables",
        # storage/evaluation.py: the labeled scenario runs per configuration (`evaluation` asset, `hsi eval`).
        """
        CREATE TABLE IF NOT EXISTS evaluation_configurations (
            configuration VARCHAR PRIMARY KEY,
            endpoint VARCHAR,
            model VARCHAR,
            quality_level VARCHAR NOT NULL,
            prompt_sha256 VARCHAR,
            description VARCHAR,
            updated_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS evaluation_results (
            configuration VARCHAR NOT NULL,
            scenario_id VARCHAR NOT NULL,
            category VARCHAR NOT NULL,
            expected_level VARCHAR NOT NULL,
            band_low INTEGER NOT NULL,
            band_high INTEGER NOT NULL,
            adversarial BOOLEAN NOT NULL,
            status VARCHAR NOT NULL,
            risk_score INTEGER,
            risk_level VARCHAR,
            summary VARCHAR,
            injection_flagged BOOLEAN NOT NULL,
            llm_calls INTEGER NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            latency_ms DOUBLE NOT NULL,
            generation_ms DOUBLE NOT NULL,
            sections_removed VARCHAR[] NOT NULL,
            model VARCHAR,
            error VARCHAR,
            evaluated_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (configuration, scenario_id)
        );
        CREATE TABLE IF NOT EXISTS evaluation_figures (
            configuration VARCHAR PRIMARY KEY,
            scenarios INTEGER NOT NULL,
            schema_valid_rate DOUBLE,
            level_accuracy DOUBLE,
            macro_f1 DOUBLE,
            score_mae_to_band DOUBLE,
            under_call_rate DOUBLE,
            alert_scenarios INTEGER NOT NULL,
            prompt_tokens BIGINT NOT NULL,
            completion_tokens BIGINT NOT NULL,
            cached_tokens BIGINT NOT NULL,
            latency_p50_ms DOUBLE,
            latency_p95_ms DOUBLE,
            tokens_per_second DOUBLE,
            llm_calls INTEGER NOT NULL,
            adversarial_correct INTEGER NOT NULL,
            adversarial_scenarios INTEGER NOT NULL,
            confusion JSON NOT NULL,
            evaluated_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS evaluation_agreement (
            configuration_a VARCHAR NOT NULL,
            configuration_b VARCHAR NOT NULL,
            kappa DOUBLE,
            scenarios INTEGER NOT NULL,
            evaluated_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (configuration_a, configuration_b)
        );
        """,
    ),
    (
        5,
        "bounds: cuts recorded on the row, prompt degradation",
        # Contract section 6: optional enrichment over a bound is cut and the detection kept; the cuts are listed on
        # its row (a JSON list, NULL when nothing was cut). A prompt that only fits after degrading past the section
        # removals (core/prompt/budget.py DEGRADATION_ORDER) lists the steps taken.
        """
        ALTER TABLE detections ADD COLUMN IF NOT EXISTS enrichment_cuts JSON;
        ALTER TABLE budgeted_prompts ADD COLUMN IF NOT EXISTS prompt_degraded VARCHAR[];
        """,
    ),
    (
        6,
        "verdicts: the model's score beside the evidence floor; evidence-only alerts",
        # core/verdict/final.py: risk_score = max(model_score, floor_score); who decided and why stay on the row.
        # storage/evidence_alerts.py: alerts decided from the detections alone, before any LLM verdict, one per
        # camera + track + cooldown slot (alert_key); the MQTT publisher reads them too.
        """
        ALTER TABLE risk_assessments ADD COLUMN IF NOT EXISTS model_score INTEGER;
        ALTER TABLE risk_assessments ADD COLUMN IF NOT EXISTS floor_score INTEGER;
        ALTER TABLE risk_assessments ADD COLUMN IF NOT EXISTS floor_reasons JSON;
        ALTER TABLE risk_assessments ADD COLUMN IF NOT EXISTS floor_ignored JSON;
        ALTER TABLE risk_assessments ADD COLUMN IF NOT EXISTS decided_by VARCHAR;
        CREATE TABLE IF NOT EXISTS evidence_alerts (
            alert_key VARCHAR PRIMARY KEY,
            camera_id VARCHAR NOT NULL,
            track_id VARCHAR,
            detection_id VARCHAR NOT NULL,
            risk_score INTEGER NOT NULL,
            risk_level VARCHAR NOT NULL,
            reasons JSON NOT NULL,
            detected_at TIMESTAMPTZ NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            batch_id VARCHAR,
            webhook_status VARCHAR
        );
        """,
    ),
    (
        7,
        "camera activity aggregate (history baselines)",
        # storage/history.py: detections per camera, quarter-hour UTC bucket and label, maintained at ingest, so a
        # batch's baseline reads a few hundred rows instead of millions of detections. Filled from what is stored.
        # No primary key: its index slowed every ingest by half (storage/history.py _MERGE).
        """
        CREATE TABLE IF NOT EXISTS camera_activity (
            camera_id VARCHAR NOT NULL,
            bucket_start TIMESTAMPTZ NOT NULL,
            label VARCHAR NOT NULL,
            detections BIGINT NOT NULL,
            first_ingested_at TIMESTAMPTZ NOT NULL
        );
        INSERT INTO camera_activity
        SELECT camera_id, to_timestamp(floor(epoch(ts) / 900) * 900) AS bucket_start, label, count(*), min(ingested_at)
        FROM detections GROUP BY ALL ORDER BY bucket_start;
        """,
    ),
    (
        8,
        "verdicts out: MQTT outbox, Home Assistant cameras, Frigate write-backs",
        # storage/mqtt_outbox.py: what the verdict publisher sent, keyed by batch (a restart sends nothing twice
        # and skips nothing), the cameras with Home Assistant entities; storage/frigate_writeback.py: verdicts
        # written back to Frigate events.
        """
        CREATE TABLE IF NOT EXISTS mqtt_outbox (
            message_key VARCHAR PRIMARY KEY,
            camera_id VARCHAR NOT NULL,
            batch_id VARCHAR,
            sent VARCHAR NOT NULL,
            window_start TIMESTAMPTZ,
            published_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS mqtt_cameras (
            camera_id VARCHAR PRIMARY KEY,
            retained_topics JSON NOT NULL,
            discovery_sha256 VARCHAR NOT NULL,
            last_window_start TIMESTAMPTZ,
            discovered_at TIMESTAMPTZ NOT NULL,
            removed_at TIMESTAMPTZ
        );
        CREATE TABLE IF NOT EXISTS mqtt_publisher (
            name VARCHAR PRIMARY KEY,
            since TIMESTAMPTZ NOT NULL,
            last_connected_at TIMESTAMPTZ,
            last_error VARCHAR,
            updated_at TIMESTAMPTZ
        );
        CREATE TABLE IF NOT EXISTS frigate_writebacks (
            batch_id VARCHAR PRIMARY KEY,
            event_ids VARCHAR[] NOT NULL,
            status VARCHAR NOT NULL,
            attempts INTEGER NOT NULL,
            last_error VARCHAR,
            updated_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    (
        10,
        "evaluation: splits, the model's score beside the evidence floor, false alarms",
        # storage/evaluation.py: one LLM pass gives three configurations (model only, floor only, model + floor);
        # each result keeps the scenario's split (tune / holdout) and what the floor said.
        """
        ALTER TABLE evaluation_results ADD COLUMN IF NOT EXISTS split VARCHAR;
        ALTER TABLE evaluation_results ADD COLUMN IF NOT EXISTS model_score INTEGER;
        ALTER TABLE evaluation_results ADD COLUMN IF NOT EXISTS floor_score INTEGER;
        ALTER TABLE evaluation_results ADD COLUMN IF NOT EXISTS floor_reasons VARCHAR[];
        ALTER TABLE evaluation_results ADD COLUMN IF NOT EXISTS decided_by VARCHAR;
        ALTER TABLE evaluation_figures ADD COLUMN IF NOT EXISTS false_alarm_rate DOUBLE;
        ALTER TABLE evaluation_figures ADD COLUMN IF NOT EXISTS low_scenarios INTEGER DEFAULT 0;
        """,
    ),
    (
        11,
        "model trust: what the model said beside the stored verdict, the trust that applied; measured trust per model",
        # core/verdict/trust.py: the answering model may raise a verdict above the evidence floor's level only as far
        # as its trust; each row keeps the model's own level and the trust (value, where from, why) so a verdict the
        # model wanted higher is never silent. model_trust holds what `hsi eval` measured per model fingerprint.
        added_columns(
            "risk_assessments",
            model_level="VARCHAR",
            model_trust="INTEGER",
            trust_source="VARCHAR",
            trust_reason="VARCHAR",
            model_fingerprint="VARCHAR",
        )
        + """
        CREATE TABLE IF NOT EXISTS model_trust (
            fingerprint VARCHAR PRIMARY KEY,
            model VARCHAR NOT NULL,
            model_size BIGINT,
            schema VARCHAR NOT NULL,
            quality_level VARCHAR NOT NULL,
            trust INTEGER NOT NULL,
            false_alarm_goal DOUBLE NOT NULL,
            split VARCHAR NOT NULL,
            configuration VARCHAR NOT NULL,
            sweep JSON NOT NULL,
            measured_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    (
        38,  # issue 38's number: migrations are numbered ahead, by issue
        "household corrections of stored verdicts",
        # storage/corrections.py: one row per correction (CLI, MQTT, Dagster), keyed by the batch, the verdict it
        # corrects (its assessed_at) and the level, so the same correction twice is one row and a batch assessed
        # again keeps the correction of the verdict it named; refusals counted per source and field (bounded);
        # storage/exceptions.py: the household exceptions removed by hand (`hsi exceptions remove`).
        """
        CREATE TABLE IF NOT EXISTS corrections (
            correction_key VARCHAR PRIMARY KEY,
            batch_id VARCHAR NOT NULL,
            camera_id VARCHAR NOT NULL,
            level VARCHAR NOT NULL,
            direction VARCHAR NOT NULL,
            verdict_level VARCHAR,
            verdict_score INTEGER,
            verdict_assessed_at TIMESTAMPTZ NOT NULL,
            source VARCHAR NOT NULL,
            note VARCHAR,
            received_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS correction_refusals (
            source VARCHAR NOT NULL,
            field VARCHAR NOT NULL,
            refused BIGINT NOT NULL,
            last_reason VARCHAR NOT NULL,
            last_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (source, field)
        );
        CREATE TABLE IF NOT EXISTS exception_removals (
            pattern_key VARCHAR PRIMARY KEY,
            removed_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    (
        40,  # issue 40's number: migrations are numbered ahead, by issue
        "Frigate's evidence: re-judgements (a late description joined a batch) and Frigate's review items",
        # storage/frigate.py asks for re-judgements; storage/pipeline_tables.unassessed_batches lists the batch again
        # until a context and an assessment newer than the request are stored. frigate_reviews: one row per review
        # item (core/frigate/reviews.py), the latest of its messages merged in; the context of the batch covering its
        # time span shows it.
        """
        CREATE TABLE IF NOT EXISTS batch_rejudgements (
            batch_id VARCHAR PRIMARY KEY,
            reason VARCHAR NOT NULL,
            requested_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS frigate_reviews (
            review_id VARCHAR PRIMARY KEY,
            camera_id VARCHAR NOT NULL,
            start_time TIMESTAMPTZ NOT NULL,
            end_time TIMESTAMPTZ,
            severity VARCHAR,
            threat_level INTEGER,
            objects VARCHAR[] NOT NULL,
            zones VARCHAR[] NOT NULL,
            detections VARCHAR[] NOT NULL,
            summary JSON,
            ignored JSON,
            source VARCHAR NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    (
        44,  # issue 44's number
        "visits: batches of one site linked across cameras (core/visits/), the visit's own level",
        # storage/visits.py: one row per visit (its sightings kept as JSON, at most VISIT_MAX_BATCHES) and one link
        # row per batch (keyed by batch: linking it again links nothing twice). The visit's level is its own verdict:
        # an escalation is recorded here, never by rewriting an earlier batch's stored assessment.
        """
        CREATE TABLE IF NOT EXISTS visits (
            visit_id VARCHAR PRIMARY KEY,
            first_ts TIMESTAMPTZ NOT NULL,
            last_ts TIMESTAMPTZ NOT NULL,
            cameras VARCHAR[] NOT NULL,
            batch_count INTEGER NOT NULL,
            identities VARCHAR[] NOT NULL,
            is_unknown BOOLEAN NOT NULL,
            sightings JSON NOT NULL,
            risk_score INTEGER NOT NULL DEFAULT 0,
            risk_level VARCHAR NOT NULL DEFAULT 'low',
            reasons JSON NOT NULL DEFAULT '[]',
            updated_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE IF NOT EXISTS visit_batches (
            batch_id VARCHAR PRIMARY KEY,
            visit_id VARCHAR NOT NULL,
            camera_id VARCHAR NOT NULL,
            why VARCHAR NOT NULL,
            linked_at TIMESTAMPTZ NOT NULL
        );
        CREATE INDEX IF NOT EXISTS visit_batches_visit ON visit_batches (visit_id);
        """,
    ),
    (
        3802,  # issue 38's second migration
        "household trust: the model's trust measured on the household's own corrected batches",
        # storage/trust.py: `hsi eval --household` with a model stores here, per fingerprint, the trust its sweep over
        # the corrected batches recommends once there are enough of them (core/evaluation/trust_sweep.py); production
        # reads it before the labeled set's `model_trust` row: the household's own labels are about its own cameras.
        """
        CREATE TABLE IF NOT EXISTS household_trust (
            fingerprint VARCHAR PRIMARY KEY,
            model VARCHAR NOT NULL,
            model_size BIGINT,
            schema VARCHAR NOT NULL,
            quality_level VARCHAR NOT NULL,
            trust INTEGER NOT NULL,
            batches INTEGER NOT NULL,
            false_alarm_goal DOUBLE NOT NULL,
            sweep JSON NOT NULL,
            measured_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    (
        4401,  # issue 44's second migration
        "issue 44 (second): each visit link keeps its short reason (time, neighbour, camera group, plate, reid)",
        # storage/visits.py: `link` is the reason a batch (or an evidence-only alert, `evidence:<key>`) joined its
        # visit, shown in the visit's metadata; NULL on links made before this migration (their `why` says it).
        added_columns("visit_batches", link="VARCHAR"),
    ),
]

LATEST_VERSION = max(version for version, _, _ in MIGRATIONS)  # numbers are assigned ahead


def has_table(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    """False on a database older than the migration that made `table`, opened read-only (`hsi config check`,
    `hsi corrections`, `hsi mqtt status` read such databases without migrating them)."""
    row = conn.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = current_schema()",
        [table],
    ).fetchone()
    return bool(row and row[0])


def migrate(conn: duckdb.DuckDBPyConnection) -> int:
    """Bring the database to the latest schema version; safe to call any number of times. Returns the version."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations"
        " (version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMPTZ DEFAULT now())"
    )
    applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations").fetchall()}
    for version, name, ddl in MIGRATIONS:
        if version in applied:
            continue
        conn.execute("BEGIN TRANSACTION")
        try:
            conn.execute(ddl)
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name])
            conn.execute("COMMIT")
        except Exception:
            conn.execute("ROLLBACK")
            raise
    return LATEST_VERSION
