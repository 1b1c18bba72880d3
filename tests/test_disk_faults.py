"""A full disk poisons nothing, the pure parts: a `.pyc` cut short on a full disk is never read as code
by a later launch (abbisect/launch/bytecode.py), a log that says the disk was full is named, and a machine fault's
hint names the option of the folder it happened in. The whole path, on a real full disk (a small tmpfs), is in
test_fault_injection.py."""

from __future__ import annotations

import errno
import os
import py_compile
import sys
from pathlib import Path

from abbisect.infra.cache import Cache
from abbisect.infra.errors import describe_os_error
from abbisect.launch.bytecode import FOLDER, bytecode_folder, disk_fault


def _compiled(folder: Path, name: str) -> Path:
    source = folder / "src" / f"{name}.py"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("VALUE = " + repr("x" * 9000) + "\n" + "def f():\n    return VALUE\n")
    return Path(py_compile.compile(str(source), cfile=str(folder / f"{name}.pyc")))


def test_a_pyc_cut_short_is_removed_before_the_next_launch_and_a_whole_one_kept(tmp_path):
    cache = Cache(tmp_path / "cache")
    folder = bytecode_folder(cache, "key", sys.executable)
    assert folder == cache.env("key") / FOLDER and folder.is_dir()
    whole, cut, empty = (_compiled(folder / "lib", n) for n in ("whole", "cut", "empty"))
    cut.write_bytes(cut.read_bytes()[:4096])  # what a write on a full disk leaves
    empty.write_bytes(b"")
    assert bytecode_folder(cache, "key", sys.executable) == folder
    assert whole.is_file() and not cut.exists() and not empty.exists()


def test_a_pyc_checked_once_is_not_read_again(tmp_path):
    """Only what was written since the last check is loaded: a launch of a big engine does not pay for every
    module's bytecode again."""
    cache = Cache(tmp_path / "cache")
    folder = bytecode_folder(cache, "key", sys.executable)
    old = _compiled(folder, "old")
    bytecode_folder(cache, "key", sys.executable)
    stamp = (folder / ".checked").stat().st_mtime_ns
    os.utime(old, ns=(stamp - 10**9, stamp - 10**9))  # older than the last check: not looked at again
    old.write_bytes(old.read_bytes()[:100])
    os.utime(old, ns=(stamp - 10**9, stamp - 10**9))
    bytecode_folder(cache, "key", sys.executable)
    assert old.exists()


def test_a_folder_that_cannot_be_checked_is_emptied(tmp_path):
    cache = Cache(tmp_path / "cache")
    folder = bytecode_folder(cache, "key", sys.executable)
    kept = _compiled(folder, "kept")
    bytecode_folder(cache, "key", str(tmp_path / "no-such-python"))
    assert folder.is_dir() and not kept.exists()


def test_a_log_that_says_the_disk_was_full_is_named():
    for log in ("OSError: [Errno 28] No space left on device: '/c/x'", "error: failed to write (os error 28)",
                "Traceback …\nEOFError: marshal data too short\n", "ValueError: bad marshal data (unknown type code)",
                "OSError: [Errno 122] Disk quota exceeded"):
        line = disk_fault("starting\n" + log + "\nbye\n")
        assert line is not None and "\n" not in line and line in log, (log, line)
    assert disk_fault("INFO served 4 requests\nall good\n") is None


def test_a_machine_faults_hint_names_the_folders_option(tmp_path):
    cache = tmp_path / "cache"
    results = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "results" / "r" / "x"))
    inside = OSError(errno.EROFS, "Read-only file system", str(cache / "envs" / "k"))
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "bisect.md"))
    assert "--output" in describe_os_error(results, cache) and "--cache-dir" not in describe_os_error(results, cache)
    assert "--cache-dir" in describe_os_error(inside, cache)
    assert "point --output at a larger disk" in describe_os_error(full, cache)
    copied = OSError(errno.ENOSPC, "No space left on device")  # shutil's copy: the source first, what it wrote second
    copied.filename, copied.filename2 = str(cache / "trials" / "k" / "server.log"), str(tmp_path / "out" / "server.log")
    assert "point --output" in describe_os_error(copied, cache) and str(tmp_path / "out") in describe_os_error(copied, cache)
