"""Licence plates as the household lists them (KNOWN_PLATES, a profile's resident_vehicles) and as they are compared.

Its own small module, free of YAML and pydantic, because `settings.py` checks KNOWN_PLATES with it and the
llama-server image imports the settings with nothing heavy (tests/llm/test_argv.py).
"""

from __future__ import annotations

PLATE_SEPARATORS = " -.·"


def normalise_plate(text: str) -> str:
    """A plate as compared: upper case, without spaces, hyphens or dots (`kx73-abc` is `KX73ABC`)."""
    return "".join(ch for ch in text.upper() if ch not in PLATE_SEPARATORS)


def plate_problem(text: object) -> str | None:
    """Why an entry of a known-plates list (KNOWN_PLATES, a profile's resident_vehicles) is not a plate, None when
    it is one: 2-12 letters or digits once the separators are gone."""
    if not isinstance(text, str):
        return f"{text!r} is not text"
    plate = normalise_plate(text.strip())
    if not 2 <= len(plate) <= 12 or not plate.isalnum():
        return f"{text!r} is not a plate (2-12 letters or digits, spaces, hyphens or dots between them)"
    return None
