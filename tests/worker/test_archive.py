"""Bundles unpacked on the worker: what is refused, and what an accepted one becomes on disk."""

from __future__ import annotations

import gzip
import io
import re
import stat
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnprof.contract.bundle import BundleRefused, check, unpack
from attnprof.server.errors import InvalidPayload, PayloadTooLarge
from attnprof.server.jobs.bundle import check_bundle

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


def _dir(name: str) -> tarfile.TarInfo:
    return _special(name, tarfile.DIRTYPE)


@pytest.mark.parametrize(
    ("members", "word"),
    [
        ((("a.py", b"1"), ("./a.py", b"2")), "appears twice"),
        ((("a/b.py", b"1"), ("a/./b.py", b"2")), "appears twice"),
        ((("a/b.py", b"1"), ("a//b.py", b"2")), "appears twice"),
        ((_dir("pkg"), _dir("pkg/")), "appears twice"),
        ((_dir("."), _dir("./")), "appears twice"),
        ((_dir("pkg"), ("pkg", b"1")), "both a file and a directory"),
        ((("pkg", b"1"), _dir("pkg")), "both a file and a directory"),
        ((("a", b"1"), ("a/b", b"2")), "under 'a', which an earlier member made a file"),
        ((("a", b"1"), _dir("a/b/c")), "under 'a', which an earlier member made a file"),
        ((("a/b/c", b"1"), ("a/b", b"2")), "earlier members are inside it"),
        ((("a", b"1"), _special("a", tarfile.SYMTYPE, "b")), "link"),
        ((("./", b"1"),), "root folder"),
        ((("", b"1"),), "root folder"),
        ((("x" * 120 + "\0.py", b"1"),), "NUL"),
        ((("/".join(["d" * 200] * 6), b"1"),), "at most 1024"),
        ((("d" * 256, b"1"),), "longer than 255 bytes"),
        (tuple((f"d{i}/e/f", b"") for i in range(11)), "more than 20 directories"),
    ],
    ids=[
        "dot-slash",
        "dot-component",
        "double-slash",
        "dir-twice",
        "root-twice",
        "dir-then-file",
        "file-then-dir",
        "under-a-file",
        "dir-under-a-file",
        "file-over-a-dir",
        "file-then-link",
        "file-at-root",
        "empty-name",
        "nul",
        "long-path",
        "long-name",
        "many-dirs",
    ],
)
def test_member_list_refusals_in_the_check_and_on_unpacking(tmp_path: Path, members: tuple, word: str) -> None:
    data = _tar(*members)
    limits = {**LIMITS, "max_members": 20}
    with pytest.raises(BundleRefused, match=re.escape(word)):
        check(data, **limits)
    with pytest.raises(InvalidPayload, match=re.escape(word)):
        check_bundle(data, **limits)
    with pytest.raises(BundleRefused, match=re.escape(word)):
        unpack(data, tmp_path / "src", **limits)


def test_long_names_are_cut_in_messages() -> None:
    with pytest.raises(BundleRefused) as err:
        check(_tar(("x" * 5000, b"1")), **LIMITS)
    assert "bytes; at most 1024" in str(err.value) and len(str(err.value)) < 300


def test_data_that_ends_early_is_refused_by_the_check_too(tmp_path: Path) -> None:
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        info = tarfile.TarInfo("pkg/big.py")
        info.size = 4096
        tar.addfile(info, io.BytesIO(b"#" * 4096))
    cut = gzip.compress(plain.getvalue()[: 512 + 1024])  # the header and a quarter of the data
    with pytest.raises(InvalidPayload, match=r"not a valid tar\.gz"):
        check_bundle(cut, **LIMITS)
    with pytest.raises(BundleRefused, match=r"not a valid tar\.gz"):
        unpack(cut, tmp_path / "src", **LIMITS)


def test_a_deep_path_unpacks_one_directory_at_a_time(tmp_path: Path) -> None:
    name = "/".join(["d"] * 500) + "/f.py"  # 1005 bytes: 500 directories, none named by a member
    assert unpack(_tar(_dir("."), (name, b"x = 1\n")), tmp_path / "src", **{**LIMITS, "max_members": 500}) == 1
    assert (tmp_path / "src" / name).read_text() == "x = 1\n"


_NAMES = [*["a", "a/b", "a/b/c", "./a", "a/", "a//b", "a/./b", "b", "A", "a/b/"] * 3, ".", "./", "", "../a", "/a"]
# Plain files and directories most often: the clashes between them are what the member list rules decide.
_KINDS = [*[tarfile.REGTYPE, tarfile.DIRTYPE] * 4, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE]


@st.composite
def _hostile_archive(draw: st.DrawFn) -> bytes:
    """A tar.gz of a few members over clashing names and every kind, maybe cut short or with a byte changed."""
    plain = io.BytesIO()
    tar_format = draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]))
    with tarfile.open(fileobj=plain, mode="w", format=tar_format) as tar:
        for _ in range(draw(st.integers(1, 5))):
            info = tarfile.TarInfo(draw(st.sampled_from(_NAMES)))
            info.type = draw(st.sampled_from(_KINDS))
            body = b"x" * draw(st.integers(0, 700)) if info.type in (tarfile.REGTYPE, tarfile.CONTTYPE) else b""
            info.size = len(body)
            info.linkname = "a" if info.type in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            tar.addfile(info, io.BytesIO(body))
    raw = plain.getvalue()
    change = draw(st.sampled_from(["none"] * 6 + ["cut", "flip"]))
    if change == "cut":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif change == "flip":
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([raw[at] ^ draw(st.integers(1, 255))]) + raw[at + 1 :]
    data = gzip.compress(raw, mtime=0)
    if draw(st.integers(0, 9)) == 0:
        data = data[: draw(st.integers(2, len(data)))]  # the gzip stream itself cut short
    return data


@given(data=_hostile_archive())
@settings(max_examples=400, deadline=None)
def test_the_service_refuses_exactly_what_the_worker_refuses(data: bytes) -> None:
    try:
        members = check_bundle(data, **LIMITS)
    except (InvalidPayload, PayloadTooLarge) as exc:
        refused_at_submission: str | None = str(exc)
    else:
        refused_at_submission = None
    with tempfile.TemporaryDirectory() as folder:
        dest = Path(folder) / "src"
        try:
            files = unpack(data, dest, **LIMITS)  # anything but BundleRefused fails the test
        except BundleRefused as exc:
            assert refused_at_submission == str(exc)
            return
        assert refused_at_submission is None, refused_at_submission
        written = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
        assert len(written) == files <= members
        assert all(not p.is_symlink() for p in dest.rglob("*"))
