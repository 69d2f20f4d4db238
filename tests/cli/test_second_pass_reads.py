"""The second detection pass reads the images it needs ahead, in its order, on worker threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from plenocal.cli.detect import IMAGES_AHEAD, _ImagesAhead


class _Dataset:
    """read_image returns the entry's path and counts the reads per path."""

    def __init__(self) -> None:
        self.reads: dict[str, int] = {}
        self.lock = threading.Lock()
        self.manifest = SimpleNamespace(image_format=SimpleNamespace(color="rgb"))

    def read_image(self, entry, as_grey=True):
        with self.lock:
            self.reads[entry.path] = self.reads.get(entry.path, 0) + 1
        return f"image {entry.path}"


def _entry(path: str) -> SimpleNamespace:
    return SimpleNamespace(path=path)


def test_planned_reads_are_taken_in_order_skipped_when_unasked_and_read_once():
    ds = _Dataset()
    a, b, c, d, e = (_entry(p) for p in "abcde")
    with ThreadPoolExecutor(max_workers=IMAGES_AHEAD) as pool:
        images = _ImagesAhead(ds, [("grey", a), ("stored", b), ("grey", c), ("grey", d)], pool)
        assert len(images.pending) == IMAGES_AHEAD
        assert images.image("stored", b) == ("image b", 1.0)  # a's read was planned, never asked for: dropped
        assert images.image("stored", b) == ("image b", 1.0)  # asked again: the image kept, not read again
        assert images.image("grey", c) == "image c"
        assert images.image("grey", e) == "image e"  # not planned: read then
        assert images.image("grey", d) == "image d"
        assert images.image("grey", a) == "image a"  # planned earlier and dropped: read again
        assert not images.pending and not images.plan
    assert ds.reads["b"] == ds.reads["c"] == ds.reads["d"] == ds.reads["e"] == 1
    assert ds.reads["a"] in (1, 2)  # its planned read may have started before it was dropped


def test_the_same_entry_in_another_form_is_another_read():
    ds = _Dataset()
    a = _entry("a")
    with ThreadPoolExecutor(max_workers=IMAGES_AHEAD) as pool:
        images = _ImagesAhead(ds, [("stored", a), ("grey", a)], pool)
        assert images.image("stored", a) == ("image a", 1.0)
        assert images.image("grey", a) == "image a"
    assert ds.reads["a"] == 2
