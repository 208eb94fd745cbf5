"""The real GPT-2 tokenizer, shipped in resources/, and incremental detokenization.

Encoding uses `tokenizers` (BPE over vocab.json + merges.txt). Decoding needs only each token's
bytes, which resources/tokenizer/token_bytes.bin holds (derived from vocab.json by
`build_token_bytes`; a test checks the two agree): reading it is far quicker than building the
BPE, which a worker would pay in every engine's cold start before its first token.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from ..storage.paths import TOKENIZER_DIR

if TYPE_CHECKING:
    from tokenizers import ByteLevelBPETokenizer

EOS_ID = 50256
REPLACEMENT = "\ufffd"
TOKEN_BYTES_FILE = TOKENIZER_DIR / "token_bytes.bin"


@lru_cache(maxsize=1)
def gpt2_tokenizer() -> ByteLevelBPETokenizer:
    from tokenizers import ByteLevelBPETokenizer

    return ByteLevelBPETokenizer(str(TOKENIZER_DIR / "vocab.json"), str(TOKENIZER_DIR / "merges.txt"))


def encode(text: str) -> list[int]:
    return gpt2_tokenizer().encode(text).ids


# --- decoding: each token's bytes -----------------------------------------------------------------


def byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-in for each byte (GPT-2's bytes_to_unicode), inverted:
    printable Latin-1 bytes stand for themselves, the other 68 map to U+0100 onwards."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(others)}}


def build_token_bytes() -> bytes:
    """token_bytes.bin's contents from the tokenizer's vocabulary: uint32 count N, N + 1 uint32
    offsets, then every token's bytes back to back (little-endian)."""
    alphabet = byte_alphabet()
    by_id = sorted((index, token) for token, index in gpt2_tokenizer().get_vocab().items())
    assert [index for index, _ in by_id] == list(range(len(by_id))), "token ids are not 0..N-1"
    pieces = [bytes(alphabet[ch] for ch in token) for _, token in by_id]
    offsets = [0]
    for piece in pieces:
        offsets.append(offsets[-1] + len(piece))
    return struct.pack(f"<I{len(offsets)}I", len(pieces), *offsets) + b"".join(pieces)


@lru_cache(maxsize=1)
def _token_table() -> tuple[array, bytes]:
    data = TOKEN_BYTES_FILE.read_bytes()
    (count,) = struct.unpack_from("<I", data)
    offsets = array("I", data[4 : 4 + 4 * (count + 1)])
    if sys.byteorder == "big":
        offsets.byteswap()  # the file is little-endian
    return offsets, data[4 + 4 * (count + 1) :]


def decode(ids: Sequence[int]) -> str:
    """Token ids -> text; bytes that do not complete a UTF-8 character become U+FFFD (as
    `tokenizers` decodes them). Ids outside the vocabulary decode to nothing, as there."""
    offsets, blob = _token_table()
    count = len(offsets) - 1
    return b"".join([blob[offsets[i] : offsets[i + 1]] for i in map(int, ids) if 0 <= i < count]).decode(
        "utf-8", "replace"
    )


class IncrementalDetokenizer:
    """Turns a stream of token ids into text deltas, holding back half-finished characters.

    Byte-level BPE splits one UTF-8 character over several tokens; decoding them one by one
    would print replacement characters. We decode a short window and emit only the new text
    once it no longer ends in U+FFFD (the approach of vLLM and TGI).
    """

    def __init__(self, prompt_ids: Sequence[int] = ()) -> None:
        self._ids: list[int] = list(prompt_ids[-8:])
        self._read = len(self._ids)  # ids up to here have been emitted
        self._prefix = max(0, self._read - 4)  # context kept so merges decode the same way

    def push(self, token_id: int) -> str:
        self._ids.append(int(token_id))
        before = decode(self._ids[self._prefix : self._read])
        after = decode(self._ids[self._prefix :])
        if len(after) <= len(before) or after.endswith(REPLACEMENT):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        self._trim()
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is still held back at the end of a stream (possibly U+FFFD)."""
        before = decode(self._ids[self._prefix : self._read])
        after = decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return after[len(before) :]

    def _trim(self) -> None:
        # Keep the window short so each push costs the same at token 10 and token 1,000.
        drop = self._prefix
        if drop > 64:
            self._ids = self._ids[drop:]
            self._prefix -= drop
            self._read -= drop
