"""Atomic saving and safe, integrity-checked loading of learner state.

A file is ``MAGIC``, the SHA-256 digest of the payload in hex and a newline, then the payload:
``torch.save`` of plain tensors and containers. Loading checks the digest before unpickling
anything (a flipped bit or a truncated file is reported as corruption, naming the file) and then
unpickles with ``weights_only=True`` (a tampered file cannot run code).

The plain digest protects against accidents (a flipped bit, a truncated copy), not against
someone who edits the payload and writes a new digest. For files from places you do not trust,
save and load with a ``key`` (bytes you keep secret): the file then carries an HMAC-SHA256 of
the payload under that key (``MAGIC_SIGNED``), which nobody without the key can recompute, and
loading refuses a file that is unsigned, signed with another key, or modified.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import os
import re
import stat
import tempfile
from pathlib import Path

import torch

__all__ = ["CorruptFileError", "MAGIC", "MAGIC_SIGNED", "atomic_save", "check_key", "safe_load"]

#: The first bytes of every file :func:`atomic_save` writes without a key (format version 1).
MAGIC = b"PYRO_CL STATE 1\n"
#: The first bytes of a file signed with a key (an HMAC-SHA256 in place of the digest).
MAGIC_SIGNED = b"PYRO_CL SIGNED 1\n"
_DIGEST_LENGTH = 64


class CorruptFileError(ValueError):
    """A saved file is truncated, modified, or not a pyro_cl state file."""


def _digest(payload: bytes, key: bytes | None) -> str:
    if key is None:
        return hashlib.sha256(payload).hexdigest()
    return hmac.new(_checked_key(key), payload, hashlib.sha256).hexdigest()


def _checked_key(key: object) -> bytes:
    return check_key(key)


def check_key(key: object) -> bytes:
    """``key`` as bytes: a checkpoint's signing key is non-empty ``bytes`` (a ``str`` must be
    encoded by the caller, e.g. ``"secret".encode()``, so no encoding is guessed).

    :raises TypeError: for anything but bytes.
    :raises ValueError: for empty bytes.
    """
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(
            f"a checkpoint key must be bytes, got {type(key).__name__}"
            + (" (encode it, e.g. key.encode())" if isinstance(key, str) else "")
        )
    if not key:
        raise ValueError("a checkpoint key must be non-empty bytes")
    return bytes(key)


def atomic_save(state: dict, path: str | os.PathLike, key: bytes | None = None) -> None:
    """Write ``state`` to ``path`` so that ``path`` is never left half-written.

    The bytes go to a temporary file in the same folder, are flushed to disk, and the file is
    renamed over ``path`` in one step (``os.replace`` is atomic on POSIX and Windows); the folder
    is then synced so the rename itself survives a power cut. Saving over an existing file keeps
    its permission bits; saving through a symbolic link replaces the file it points to and keeps
    the link. Temporary files that a crashed save (of a process no longer running) left behind
    are removed.

    :param key: sign the file with an HMAC-SHA256 under this key (see the module docstring).
    """
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(target)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    digest = _digest(payload, key).encode("ascii")
    magic = MAGIC if key is None else MAGIC_SIGNED
    handle, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent
    )
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(magic + digest + b"\n")
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


def safe_load(path: str | os.PathLike, map_location=None, key: bytes | None = None) -> dict:
    """Load a file written by :func:`atomic_save`, checking its digest (or, with ``key``, its
    signature) first.

    :raises CorruptFileError: if the file is not a pyro_cl state file, is truncated, or its
        content does not match its digest or signature (the message names the file).
    """
    path = Path(path)
    data = path.read_bytes()
    signed = data.startswith(MAGIC_SIGNED)
    if key is not None and not signed:
        raise CorruptFileError(f"{path} is not signed: it cannot be checked with the key given")
    if key is None and signed:
        raise CorruptFileError(f"{path} is signed: pass the key it was saved with")
    magic = MAGIC_SIGNED if signed else MAGIC
    header_length = len(magic) + _DIGEST_LENGTH + 1
    if not data.startswith(magic):
        raise CorruptFileError(f"{path} is not a pyro_cl state file (it lacks the header)")
    if len(data) < header_length or data[header_length - 1 : header_length] != b"\n":
        raise CorruptFileError(f"{path} is corrupt: its header is truncated")
    stored = data[len(magic) : header_length - 1].decode("ascii", errors="replace")
    payload = data[header_length:]
    if not hmac.compare_digest(_digest(payload, key), stored):
        what = (
            "the signature under the key given" if signed else "the SHA-256 digest stored with it"
        )
        raise CorruptFileError(
            f"{path} is corrupt: its content does not match {what} "
            "(the file was truncated or modified after saving, or signed with another key)"
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
