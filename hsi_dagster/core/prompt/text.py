"""Small text helpers shared by the LLM client and the risk parser."""

from __future__ import annotations

import re

_THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)


def strip_think(text: str) -> str:
    """Remove reasoning blocks (`<think>...</think>`, or an unterminated one) that some models emit."""
    return _THINK_BLOCK.sub("", text).strip()
