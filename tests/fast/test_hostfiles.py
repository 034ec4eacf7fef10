"""The host's small files (``virtdriver/hostfiles.py``): a whole file read with the fewest calls
is still the whole file, whatever its size around the read's chunk."""

from __future__ import annotations

import os

import pytest

from virtdriver.hostfiles import CHUNK, read_bytes


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5])
def test_read_bytes_is_the_whole_file(tmp_path, size: int) -> None:
    path = tmp_path / "f"
    content = os.urandom(size)
    path.write_bytes(content)
    assert read_bytes(path) == content
    assert read_bytes(str(path)) == content


def test_read_bytes_of_a_missing_file_says_so(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bytes(tmp_path / "missing")
