"""What MODEL_PATH means (llm/model_files.py) and the direction of the imports around it: the settings hold what was
configured, llm/ resolves it (the bundled SmolLM2 file when unset), and llm/ reads no environment of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hsi_dagster
from hsi_dagster.llm.model_files import SMOLLM2_FILE, model_path
from hsi_dagster.settings import HsiSettings, load_settings

PACKAGE = Path(hsi_dagster.__file__).parent
# Process launchers, not library code: the production image's entrypoint reads the key file Docker hands it
# (LLAMA_API_KEY_FILE), and the embedded server passes its parent's pid to its child through the environment.
LAUNCHERS = {"argv.py", "embedded.py"}


def _imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_settings_import_nothing_from_llm() -> None:
    assert not {m for m in _imported_modules(PACKAGE / "settings.py") if m.startswith("hsi_dagster.llm")}
    assert not hasattr(HsiSettings, "model_file")  # resolving the file is llm/'s job


def test_unset_model_path_is_the_bundled_smollm2_file_and_a_set_one_is_taken_as_given() -> None:
    settings = load_settings("/dev/null", MODEL_PATH="")
    assert settings.MODEL_PATH is None  # the settings keep what was configured: nothing
    bundled = model_path(settings.MODEL_PATH)
    assert bundled.name == SMOLLM2_FILE and bundled.is_file()
    assert model_path("/models/nemotron.gguf") == Path("/models/nemotron.gguf")


@pytest.mark.parametrize("module", sorted(p.name for p in (PACKAGE / "llm").glob("*.py") if p.name not in LAUNCHERS))
def test_llm_library_modules_read_no_environment(module: str) -> None:
    """Settings reach llm/ as arguments (settings.py -> resources -> LlamaClient), never from os.environ."""
    tree = ast.parse((PACKAGE / "llm" / module).read_text(encoding="utf-8"))
    reads = [
        f"line {node.lineno}: os.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
        and node.attr in ("environ", "environb", "getenv", "getenvb", "putenv")
    ]
    assert reads == [], f"hsi_dagster/llm/{module} reads the environment: {reads}"
