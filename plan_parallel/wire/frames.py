"""Messages on a worker's pipe, framed as :class:`multiprocessing.connection.Connection` frames them.

A frame is the payload's length (a big-endian int32; -1 and a uint64 beyond 2 GB) and the payload, so either
end may use the ``Connection`` instead. Written and read here with ``os.write`` / ``os.read`` on the pipe's
file descriptor: one system call a short message each way, and none of the ``Connection``'s Python layers (a
lane chunk's header and reply went through ~15 Python calls there).
"""
from __future__ import annotations

import os
import struct

__all__ = ["read_message", "write_message"]

_LENGTH = struct.Struct("!i")
_LONG_LENGTH = struct.Struct("!Q")
_JOINED_BELOW = 16384  # a payload this short is written with its length in one buffer; a longer one after it


def write_message(fd: int, data: bytes) -> None:
    """Write ``data`` as one frame to ``fd`` (blocking until all of it is written).

    Raises:
        OSError: the pipe is closed (``BrokenPipeError``) or ``fd`` is not open.
    """
    n = len(data)
    if n > 0x7FFFFFFF:
        _write_all(fd, _LENGTH.pack(-1) + _LONG_LENGTH.pack(n))
        _write_all(fd, data)
    elif n < _JOINED_BELOW:
        _write_all(fd, _LENGTH.pack(n) + data)
    else:
        _write_all(fd, _LENGTH.pack(n))
        _write_all(fd, data)


def read_message(fd: int) -> bytes:
    """The next frame's payload from ``fd`` (blocking until it is all there).

    Raises:
        EOFError: the pipe was closed before a frame began.
        OSError: it was closed within one, or ``fd`` is not open.
    """
    (n,) = _LENGTH.unpack(_read_exact(fd, 4, True))
    if n == -1:
        (n,) = _LONG_LENGTH.unpack(_read_exact(fd, 8, False))
    return _read_exact(fd, n, False)


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written < len(data):  # (a pipe's buffer filled, or a signal came: the rest in more writes)
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int, first: bool) -> bytes:
    """``n`` bytes from ``fd`` (``first``: nothing of the frame was read yet, so a closed pipe is an EOF)."""
    data = os.read(fd, n)
    if len(data) == n:
        return data
    parts, left = [data], n - len(data)
    while left:
        if not parts[-1]:
            if first and left == n:
                raise EOFError("the pipe was closed")
            raise OSError("the pipe was closed within a message")
        parts.append(os.read(fd, left))
        left -= len(parts[-1])
    return b"".join(parts)
