"""Real read-only folders and full disks for tests, where the machine allows mounts.

We run as root, and root ignores `chmod`, so a read-only run folder is a read-only bind mount of
the folder onto itself (EROFS for every new open, mkdir or rename below it), and a full disk is a
small tmpfs filled to the last page (ENOSPC). A plain `remount,ro` of a filesystem is refused
while any file on it is open for writing (a running sweep holds RUN/.lock open), but a fresh
bind mount has no writers yet: the sweep's open files stay writable, every new write fails,
exactly like a disk that turned read-only under a running program. Every mount is undone (lazily,
so a busy one is detached at once) when its `with` ends. Where mounting is not possible (no
CAP_SYS_ADMIN, no mount(8)) the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _try_mount(*args: str) -> str | None:
    """mount(8): None when it worked, else the first line it said."""
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) on this machine: cannot make a real read-only folder or full disk")
    proc = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["no message"])[0]


def _mount(*args: str) -> None:
    """mount(8), skipping the test with its own words when this machine does not allow it."""
    said = _try_mount(*args)
    if said is not None:
        pytest.skip(f"mounting needs root with CAP_SYS_ADMIN here ({said})")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30, check=False)


def _bind_read_only(folder: Path, tries: int = 50) -> None:
    """A bind mount and its remount to ro are two system calls (util-linux 2.38); a file the
    sweep opens for writing in between makes the remount EBUSY. Then detach and try again."""
    for _ in range(tries):
        said = _try_mount("--bind", "-o", "ro", str(folder), str(folder))
        if said is None:
            return
        _umount(folder)  # the half-done rw bind, if the bind itself succeeded
        if "busy" not in said:
            pytest.skip(f"mounting needs root with CAP_SYS_ADMIN here ({said})")
    pytest.fail(f"{folder}: the read-only bind mount stayed busy {tries} times")


@contextlib.contextmanager
def read_only_bind(folder: Path) -> Iterator[None]:
    """`folder` read-only (EROFS) from now until the block ends; its contents are kept."""
    _bind_read_only(folder)
    try:
        probe = folder / ".write-probe"
        try:
            probe.write_text("")
        except OSError as exc:
            assert exc.errno == errno.EROFS, exc
        else:
            probe.unlink()
            pytest.fail(f"{folder} is still writable after the read-only bind mount")
        yield
    finally:
        _umount(folder)


def require_mounts(scratch: Path) -> None:
    """Skip now, before anything is started, where read_only_bind would skip later."""
    scratch.mkdir(parents=True, exist_ok=True)
    with read_only_bind(scratch):
        pass


@contextlib.contextmanager
def full_tmpfs(folder: Path, size_kib: int = 256) -> Iterator[Path]:
    """A tmpfs of `size_kib` on `folder`, filled until the kernel says ENOSPC: creating a file or
    folder still works (inodes are not blocks), writing a byte into one does not."""
    folder.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(folder))
    try:
        with open(folder / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
        assert os.statvfs(folder).f_bavail == 0
        yield folder
    finally:
        _umount(folder)
