"""`hsi frigate profiles` and the config check's per-camera findings (issue 40 item 8), on the recorded night's Frigate
config: a proposal to stdout or --out (never over a file without --force), and what a camera without a profile will
and will not raise."""

from __future__ import annotations

from pathlib import Path

import pytest

from hsi_dagster.cli.main import main
from hsi_dagster.core.context.camera_profiles import parse_camera_profiles
from tests.support.loopback import JsonHandler, serve_on_loopback

RECORDED = Path(__file__).resolve().parents[1] / "data" / "frigate" / "frigate.yml"


@pytest.fixture(autouse=True)
def _no_frigate_settings(monkeypatch):
    for name in ("FRIGATE_URL", "FRIGATE_CONFIG_PATH", "CAMERA_CONTEXT_PATH", "ENRICHMENT_BACKEND"):
        monkeypatch.delenv(name, raising=False)


def test_profiles_to_stdout_read_back(capsys):
    assert main(["frigate", "profiles", "--frigate-config", str(RECORDED), "--timezone", "Europe/London"]) == 0
    text = capsys.readouterr().out
    profiles = parse_camera_profiles(text, source="stdout")
    assert set(profiles) == {"front_door", "driveway", "backyard"}
    assert profiles["front_door"].timezone == "Europe/London" and "from --timezone" in text


def test_profiles_out_refuses_to_overwrite_without_force(tmp_path, capsys, monkeypatch):
    out = tmp_path / "cameras.yaml"
    monkeypatch.setenv("FRIGATE_CONFIG_PATH", str(RECORDED))  # the setting, as the import reads it
    assert main(["frigate", "profiles", "--out", str(out)]) == 0
    assert "3 camera(s), 6 zone(s) (1 entry, 4 private, 1 public, 0 not placed)" in capsys.readouterr().err
    out.write_text("cameras: {}\n# mine\n")
    assert main(["frigate", "profiles", "--out", str(out)]) == 2
    assert "exists: give --force" in capsys.readouterr().err
    assert out.read_text() == "cameras: {}\n# mine\n"
    assert main(["frigate", "profiles", "--out", str(out), "--force"]) == 0
    assert "front_door" in parse_camera_profiles(out.read_text(), source="out")


def test_profiles_bad_input_is_a_usage_error(tmp_path, capsys):
    assert main(["frigate", "profiles"]) == 2
    assert "--frigate-config" in capsys.readouterr().err
    assert main(["frigate", "profiles", "--frigate-config", str(RECORDED), "--timezone", "Mars/Base"]) == 2
    assert "not an IANA time zone" in capsys.readouterr().err
    empty = tmp_path / "frigate.yml"
    empty.write_text("mqtt: {host: x}\n")
    assert main(["frigate", "profiles", "--frigate-config", str(empty)]) == 2
    assert "no `cameras` section" in capsys.readouterr().err


def test_config_check_names_each_camera_without_a_profile(tmp_path, capsys):
    profiles = tmp_path / "cameras.yaml"
    profiles.write_text("cameras:\n  front_door:\n    zones: [porch, walkway]\n    entry_zones: [porch]\n")
    env = tmp_path / "hsi.env"
    env.write_text(f"MODEL_PATH=/models/m.gguf\nFRIGATE_CONFIG_PATH={RECORDED}\nCAMERA_CONTEXT_PATH={profiles}\n")
    code = main(["config", "check", "--env-file", str(env), "--no-model"])
    out = capsys.readouterr().out
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("WARNING CAMERA_CONTEXT_PATH: camera ")]
    assert [line.split("'")[1] for line in lines] == ["driveway", "backyard"]  # front_door has a profile
    assert "never raises" in lines[0] and "a person not known at night on an entry or private zone" in lines[0]
    assert "(street, driveway)" in lines[0] and "a weapon" in lines[0]


def test_config_check_says_when_frigates_config_cannot_be_read(tmp_path, capsys):
    env = tmp_path / "hsi.env"
    env.write_text(f"MODEL_PATH=/models/m.gguf\nFRIGATE_CONFIG_PATH={tmp_path / 'missing.yml'}\n")
    assert main(["config", "check", "--env-file", str(env), "--no-model"]) == 0
    assert "WARNING FRIGATE_CONFIG_PATH: cameras without a profile not checked: cannot read" in capsys.readouterr().out


def test_profiles_from_frigate_url_api_config_never_print_its_credentials(capsys, monkeypatch):
    """FRIGATE_URL/api/config (a small HTTP server standing in for Frigate); the header names it without the
    user name and password the URL carries."""
    import yaml

    config = yaml.safe_load(RECORDED.read_text(encoding="utf-8"))
    paths: list[str] = []

    class Handler(JsonHandler):
        def do_GET(self):  # noqa: N802 (http.server API)
            paths.append(self.path)
            self.send_json(200, config)

    with serve_on_loopback(Handler) as url:
        monkeypatch.setenv("FRIGATE_URL", url.replace("http://", "http://viewer:s3cret@"))
        assert main(["frigate", "profiles"]) == 0
    text = capsys.readouterr().out
    assert paths == ["/api/config"]
    assert f"from {url}/api/config" in text and "s3cret" not in text
    assert set(parse_camera_profiles(text, source="api")) == {"front_door", "driveway", "backyard"}
