"""Atomic saving and safe, integrity-checked loading of learner state.

A file is ``MAGIC``, the SHA-256 digest of the payload in hex and a newline, then the payload:
``torch.save`` of plain tensors and containers. Loading checks the digest before unpickling
anything (a flipped bit or a truncated file is reported as corruption, naming the file) and then
unpickles with ``weights_only=True`` (a tampered file cannot run code).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import stat
import tempfile
from pathlib import Path

import torch

__all__ = ["CorruptFileError", "MAGIC", "atomic_save", "safe_load"]

#: The first bytes of every file :func:`atomic_save` writes (format version 1).
MAGIC = b"PYRO_CL STATE 1\n"
_DIGEST_LENGTH = 64


class CorruptFileError(ValueError):
    """A saved file is truncated, modified, or not a pyro_cl state file."""


def atomic_save(state: dict, path: str | os.PathLike) -> None:
    """Write ``state`` to ``path`` so that ``path`` is never left half-written.

    The bytes go to a temporary file in the same folder, are flushed to disk, and the file is
    renamed over ``path`` in one step (``os.replace`` is atomic on POSIX and Windows); the folder
    is then synced so the rename itself survives a power cut. Saving over an existing file keeps
    its permission bits; saving through a symbolic link replaces the file it points to and keeps
    the link. Temporary files that a crashed save (of a process no longer running) left behind
    are removed.
    """
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode("ascii")
    handle, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent
    )
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(MAGIC + digest + b"\n")
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, _mode_for(target))
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    _sync_folder(target.parent)


def safe_load(path: str | os.PathLike, map_location=None) -> dict:
    """Load a file written by :func:`atomic_save`, checking its digest first.

    :raises CorruptFileError: if the file is not a pyro_cl state file, is truncated, or its
        content does not match its digest (the message names the file).
    """
    path = Path(path)
    data = path.read_bytes()
    header_length = len(MAGIC) + _DIGEST_LENGTH + 1
    if not data.startswith(MAGIC):
        raise CorruptFileError(f"{path} is not a pyro_cl state file (it lacks the header)")
    if len(data) < header_length or data[header_length - 1 : header_length] != b"\n":
        raise CorruptFileError(f"{path} is corrupt: its header is truncated")
    stored = data[len(MAGIC) : header_length - 1].decode("ascii", errors="replace")
    payload = data[header_length:]
    if hashlib.sha256(payload).hexdigest() != stored:
        raise CorruptFileError(
            f"{path} is corrupt: its content does not match the SHA-256 digest stored with it "
            "(the file was truncated or modified after saving)"
        )
    try:
        return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as error:  # a valid digest over bytes that are not a state
        raise CorruptFileError(f"{path} holds no readable pyro_cl state: {error}") from error


def _mode_for(target: Path) -> int:
    """The existing file's permission bits, or what a new file gets under the umask."""
    with contextlib.suppress(FileNotFoundError):
        return stat.S_IMODE(target.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _sync_folder(folder: Path) -> None:
    """fsync the folder so a rename in it is durable (POSIX; a no-op where folders cannot be
    opened, e.g. on Windows)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # some file systems refuse to sync a folder
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remove_stale_temporaries(target: Path) -> None:
    """Remove ``.<name>.<pid>.*.tmp`` files whose writing process no longer runs."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(\d+)\..*\.tmp$")
    for entry in target.parent.iterdir():
        match = pattern.match(entry.name)
        if match and not _process_is_running(int(match.group(1))):
            with contextlib.suppress(OSError):
                entry.unlink()


def _process_is_running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # it exists but is not ours, or we cannot tell: leave its file alone
    return True
