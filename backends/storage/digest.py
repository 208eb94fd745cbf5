"""A file's SHA-256 without reading it whole into memory (hashlib.file_digest is Python 3.11+)."""

from __future__ import annotations

import hashlib
from typing import BinaryIO

CHUNK = 1 << 20


def sha256_of(handle: BinaryIO) -> str:
    """The hex SHA-256 of what is left to read in `handle`."""
    digest = hashlib.sha256()
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()
