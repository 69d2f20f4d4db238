"""Content digests of files: what a file holds, whatever its name, size or modification time."""

from __future__ import annotations

import hashlib
from pathlib import Path

HASH_CHUNK_BYTES = 1 << 20
"""Read size of the content hash (1 MiB)."""


def content_digest(path: str | Path, cache: dict[Path, str] | None = None) -> str:
    """BLAKE2b (160 bits) of a file's bytes, or ``"missing"`` when it cannot be read.

    ``cache`` (path → digest) holds the digests already computed by the caller.
    """
    p = Path(path)
    if cache is not None and p in cache:
        return cache[p]
    h = hashlib.blake2b(digest_size=20)
    try:
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(HASH_CHUNK_BYTES), b""):
                h.update(chunk)
        digest = h.hexdigest()
    except OSError:
        digest = "missing"
    if cache is not None:
        cache[p] = digest
    return digest
