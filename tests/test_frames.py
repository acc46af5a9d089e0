"""A worker's pipe framed by wire.frames: the same frames as multiprocessing's Connection, whole or not at all."""
from __future__ import annotations

import multiprocessing as mp
import os
import threading

import pytest

from plan_parallel.wire.frames import read_message, write_message

SIZES = [0, 1, 100, 16383, 16384, 70_000, 3_000_000]  # (either side of the length joined with the payload; a
# payload larger than a socket's buffer, written and read in parts while the other end reads)


def _through(send, receive, data: bytes) -> bytes:
    """``data`` sent by ``send`` on one thread and read by ``receive`` on this one (a large frame fills the buffer)."""
    sender = threading.Thread(target=send, args=(data,), daemon=True)
    sender.start()
    try:
        return receive()
    finally:
        sender.join(10)
        assert not sender.is_alive(), "the sender never finished its frame"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", SIZES)
def test_a_frame_written_here_reads_whole_in_a_connection_and_back(n):
    here, there = mp.Pipe(duplex=True)
    data = (bytes(range(251)) * (n // 251 + 1))[:n]  # (251: no frame boundary falls on a repeat)
    try:
        assert _through(lambda d: write_message(here.fileno(), d), there.recv_bytes, data) == data
        assert _through(there.send_bytes, lambda: read_message(here.fileno()), data) == data
        assert _through(lambda d: write_message(there.fileno(), d), lambda: read_message(here.fileno()), data) == data
    finally:
        here.close()
        there.close()


@pytest.mark.timeout(30)
def test_frames_in_a_row_are_read_one_at_a_time():
    here, there = mp.Pipe(duplex=True)
    try:
        for k in range(5):
            write_message(here.fileno(), b"%d" % k * k)
        assert [read_message(there.fileno()) for _ in range(5)] == [b"%d" % k * k for k in range(5)]
    finally:
        here.close()
        there.close()


@pytest.mark.timeout(30)
def test_a_pipe_closed_before_a_frame_is_eof_and_within_one_is_an_oserror():
    here, there = mp.Pipe(duplex=True)
    there.close()
    with pytest.raises(EOFError):
        read_message(here.fileno())
    here.close()

    here, there = mp.Pipe(duplex=True)
    os.write(there.fileno(), (10).to_bytes(4, "big") + b"abc")  # 10 bytes announced, 3 sent
    there.close()
    with pytest.raises(OSError, match="within a message"):
        read_message(here.fileno())
    here.close()


@pytest.mark.timeout(30)
def test_writing_to_a_pipe_whose_reader_is_gone_raises_oserror():
    here, there = mp.Pipe(duplex=True)
    there.close()
    with pytest.raises(OSError):
        write_message(here.fileno(), b"x" * 100)
    here.close()
