"""Bundles unpacked on the worker: what is refused, and what an accepted one becomes on disk."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

import pytest

from service.jobs.archive import BundleRefused, check, unpack

LIMITS = {"max_bytes": 1 << 20, "max_unpacked_bytes": 1 << 20, "max_members": 50}


def _tar(*members: tarfile.TarInfo | tuple[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            if isinstance(m, tuple):
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                info.mode = 0o4777  # setuid and world-writable in the archive: ignored on unpacking
                tar.addfile(info, io.BytesIO(m[1]))
            else:
                tar.addfile(m)
    return buf.getvalue()


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def test_a_bundle_unpacks_to_plain_files(tmp_path: Path) -> None:
    data = _tar(("pkg/__init__.py", b""), ("pkg/mod.py", b"x = 1\n"), _special("pkg/sub", tarfile.DIRTYPE))
    assert unpack(data, tmp_path, **LIMITS) == 2
    assert (tmp_path / "pkg" / "mod.py").read_text() == "x = 1\n" and (tmp_path / "pkg" / "sub").is_dir()
    assert stat.S_IMODE((tmp_path / "pkg" / "mod.py").stat().st_mode) == 0o644


@pytest.mark.parametrize(
    ("members", "word"),
    [
        ((("/etc/cron.d/x", b"1"),), "absolute"),
        ((("../../x.py", b"1"),), ".."),
        ((("pkg/../../x.py", b"1"),), ".."),
        ((_special("pkg/evil", tarfile.SYMTYPE, "/etc/passwd"),), "link"),
        ((("pkg/a", b"1"), _special("pkg/b", tarfile.LNKTYPE, "pkg/a")), "link"),
        ((_special("dev", tarfile.CHRTYPE),), "device"),
        ((_special("fifo", tarfile.FIFOTYPE),), "FIFO"),
        ((("a.py", b"1"), ("a.py", b"2")), "twice"),
    ],
)
def test_refusals(tmp_path: Path, members: tuple, word: str) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(BundleRefused) as err:
        unpack(_tar(*members), dest, **LIMITS)
    assert word in str(err.value)
    assert not (tmp_path / "x.py").exists()


def test_bombs_and_limits(tmp_path: Path) -> None:
    bomb = _tar(("zeros", b"\0" * (50 << 20)))
    assert len(bomb) < 100_000
    with pytest.raises(BundleRefused) as err:
        unpack(bomb, tmp_path, **LIMITS)
    assert err.value.too_large and not (tmp_path / "zeros").exists()  # refused from its header, nothing written
    with pytest.raises(BundleRefused, match="more than 50 members"):
        check(_tar(*((f"f{i}", b"") for i in range(51))), **LIMITS)
    with pytest.raises(BundleRefused, match="not gzip"):
        check(b"PK\x03\x04 a zip", **LIMITS)
    with pytest.raises(BundleRefused, match="the limit is"):
        check(b"\x1f\x8b" + b"\0" * 100, max_bytes=50, max_unpacked_bytes=10, max_members=1)
    with pytest.raises(BundleRefused, match="empty"):
        check(_tar(), **LIMITS)
