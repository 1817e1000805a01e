"""The Dagster UI as a person sees it: headless Chromium (Debian's package, driven over the DevTools protocol by
tests/support/chromium.py) opens a real dagster-webserver on 127.0.0.1 whose DAGSTER_HOME holds a materialized
`risk_timeline`, finds the asset graph with the pipeline assets, and opens the timeline image from the asset's
metadata. Screenshots are kept under the test's tmp dir (and refreshed in docs/screenshots/ with
HSI_UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import io
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import dagster as dg
import httpx
import numpy as np
import pytest
from matplotlib import image as mpimg

from hsi_dagster.assets.timeline import risk_timeline
from hsi_dagster.core.outbound.timeline import BAND_COLOURS, SIZE_PX
from hsi_dagster.jobs import risk_timeline_job
from hsi_dagster.llm.embedded import free_port
from hsi_dagster.resources import HsiDuckDBResource
from tests.support.chromium import Page, chromium_page
from tests.support.debian_tools import ensure_debian_tools
from tests.support.observability_data import DAY, build_processed_set
from tests.support.processes import start_logged, stop_group

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCREENSHOTS = REPO / "docs/screenshots"
PIPELINE_ASSETS = ["detections", "detection_batches", "enriched_contexts", "budgeted_prompts", "risk_assessments"]
GROUPS = ("ingest", "pipeline", "reports")
PARTITION = DAY.strftime("%Y-%m-%d")
WEBSERVER_WAIT_S = 120.0
pytestmark = pytest.mark.engine  # headless Chromium: the slow tier (.ci/run), not `./dev test`


@dataclass(frozen=True)
class Webserver:
    url: str
    home: Path
    groups: tuple[str, ...]


@pytest.fixture(scope="module")
def webserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webserver]:
    folder = tmp_path_factory.mktemp("dagster_ui")
    home = folder / "dagster_home"
    (home / ".nux").mkdir(parents=True)
    (home / ".nux" / "nux.yaml").write_text("seen: 1\n")  # no "join the community" dialog over the page
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    db = folder / "hsi.duckdb"
    # The webserver runs in a folder of its own: Dagster's commands load a `.env` from their working directory
    # over the environment, and the repository's may point at another database.
    (folder / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: hsi_dagster.definitions\n"
    )
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "HSI_DUCKDB_PATH": str(db), "HSI_ENV_FILE": os.devnull}
    # The instance's storage is created here first, so the webserver and this process never race to create it.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs_count()
        argv = [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)]
        process = start_logged(argv, env, folder, folder / "webserver.log")
        try:
            # While it starts: the processed batches in DuckDB, and the day's timeline materialized on the same
            # instance by the project's own job.
            build_processed_set(db)
            definitions = dg.Definitions(
                assets=[risk_timeline],
                jobs=[risk_timeline_job],
                resources={"duckdb": HsiDuckDBResource(database=str(db))},
            )
            result = definitions.resolve_job_def("risk_timeline_job").execute_in_process(
                partition_key=PARTITION, instance=instance
            )
            assert result.success
        except BaseException:
            stop_group(process, grace_s=2.0)
            raise
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WEBSERVER_WAIT_S
        query = "{ assetNodes { assetKey { path } groupName } }"
        while True:
            try:
                reply = httpx.post(f"{url}/graphql", json={"query": query}, timeout=10).json()
                nodes = reply["data"]["assetNodes"]
                if len(nodes) >= len(PIPELINE_ASSETS) + 1:
                    break
            except (httpx.HTTPError, KeyError, TypeError, ValueError):
                pass
            assert process.poll() is None, (folder / "webserver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "dagster-webserver did not serve the definitions in time"
            time.sleep(0.5)
        yield Webserver(url, home, tuple(sorted({node["groupName"] for node in nodes})))
    finally:
        stop_group(process, grace_s=2.0)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    """One headless Chromium for the module, with a fresh profile (--user-data-dir) of its own."""
    binary = ensure_debian_tools({"chromium": "chromium"})["chromium"]
    with chromium_page(binary, tmp_path_factory.mktemp("chromium") / "profile") as opened:
        yield opened


def keep(screenshot: Path) -> None:
    if os.environ.get("HSI_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, SCREENSHOTS / screenshot.name)


def decode(png: bytes) -> np.ndarray:
    return np.round(mpimg.imread(io.BytesIO(png), format="png")[..., :3] * 255).astype(int)


def colour_share(pixels: np.ndarray, colour: str, tolerance: int = 3) -> float:
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    return float(np.all(np.abs(pixels - rgb) <= tolerance, axis=-1).mean())


TEXT_NODES = "Array.from(document.querySelectorAll('*')).filter(e => e.childElementCount === 0)"


def test_asset_graph_shows_the_pipeline_and_the_timeline(webserver: Webserver, page: Page, tmp_path: Path) -> None:
    assert set(GROUPS) <= set(webserver.groups)
    expanded = ",".join(f"global@global:{group}" for group in webserver.groups)  # every group unfolded
    page.goto(f"{webserver.url}/asset-groups?expanded={quote(expanded)}")
    names = PIPELINE_ASSETS + ["risk_timeline"]
    shown = page.wait_for(
        f"(() => {{ const t = new Set({TEXT_NODES}.map(e => e.textContent.trim()));"
        f" const want = {names!r}; return want.every(n => t.has(n)) && want; }})()",
        what="every asset node in the lineage graph",
    )
    assert shown == names
    assert page.evaluate("document.title").startswith(("Global asset lineage", "Dagster", "Asset"))
    time.sleep(1.0)  # let the layout settle before the picture
    png = page.screenshot(tmp_path / "dagster-asset-graph.png")
    keep(tmp_path / "dagster-asset-graph.png")
    assert decode(png).shape[:2] == (1000, 1600)


def test_timeline_image_in_the_asset_metadata(webserver: Webserver, page: Page, tmp_path: Path) -> None:
    page.goto(f"{webserver.url}/assets/risk_timeline?view=partitions&partition={PARTITION}")
    page.wait_for(
        f"{TEXT_NODES}.some(e => e.textContent.trim() === 'timeline')",
        what="the `timeline` metadata row of the partition",
    )
    # The summary table renders inline; the image is behind its [Show Markdown] link (long markdown).
    assert page.wait_for(f"{TEXT_NODES}.some(e => e.textContent.trim() === 'daily_summary')")
    assert page.wait_for(  # the table's header row renders a moment after its label
        "document.body.innerText.includes('not assessed')", what="the daily summary table's header"
    )
    page.evaluate(f"{TEXT_NODES}.find(e => e.textContent.trim() === '[Show Markdown]').click()")
    size = page.wait_for(
        "(() => { const i = Array.from(document.images).find(i => i.src.startsWith('data:image/png;base64,')"
        " && i.complete && i.naturalWidth > 0); return i && [i.naturalWidth, i.naturalHeight,"
        " Math.round(i.getBoundingClientRect().width)]; })()",
        what="the timeline PNG decoded in the page",
    )
    assert size[:2] == list(SIZE_PX)  # the PNG the asset drew, decoded by the browser
    assert size[2] > 0.8 * SIZE_PX[0]  # and shown at (nearly) full width
    time.sleep(0.5)
    png = page.screenshot(tmp_path / "dagster-risk-timeline.png")
    keep(tmp_path / "dagster-risk-timeline.png")
    pixels = decode(png)
    for level, colour in BAND_COLOURS.items():  # the bands are on screen, not only in the DOM
        assert colour_share(pixels, colour) > 0.01, level
