"""The Dagster instance's own parts, named in dagster.yaml: the run queue (`coordinator`), the warm run launcher
(`launcher`) and its pre-started run process (`worker`); and `run_history`, the runs of a batch's partition that
the sensors and `hsi process` both count for retries."""
