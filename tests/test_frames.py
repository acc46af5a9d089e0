"""A worker's pipe framed by wire.frames: the same frames as multiprocessing's Connection, whole or not at all."""
from __future__ import annotations

import multiprocessing as mp
import os
import threading

import pytest

from plan_parallel.wire.frames import read_message, write_message

SIZES = [0, 1, 100, 16383, 16384, 70_000, 3_000_000]  # (either side of the length joined with the payload; a
# payload larger than a socket's buffer, written and read in parts while the other end reads)


@pytest.fixture
def pipe():
    """Both ends of a duplex pipe, closed after the test (a test may close one first)."""
    here, there = mp.Pipe(duplex=True)
    yield here, there
    here.close()
    there.close()


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
def test_a_frame_written_here_reads_whole_in_a_connection_and_back(pipe, n):
    here, there = pipe
    data = (bytes(range(251)) * (n // 251 + 1))[:n]  # (251: no frame boundary falls on a repeat)
    assert _through(lambda d: write_message(here.fileno(), d), there.recv_bytes, data) == data
    assert _through(there.send_bytes, lambda: read_message(here.fileno()), data) == data
    assert _through(lambda d: write_message(there.fileno(), d), lambda: read_message(here.fileno()), data) == data


@pytest.mark.timeout(30)
def test_frames_in_a_row_are_read_one_at_a_time(pipe):
    here, there = pipe
    frames = [str(k).encode() * k for k in range(5)]  # (the first one empty)
    for frame in frames:
        write_message(here.fileno(), frame)
    assert [read_message(there.fileno()) for _ in frames] == frames


@pytest.mark.timeout(30)
def test_a_pipe_closed_before_a_frame_is_eof(pipe):
    here, there = pipe
    there.close()
    with pytest.raises(EOFError):
        read_message(here.fileno())


@pytest.mark.timeout(30)
def test_a_pipe_closed_within_a_frame_is_an_oserror(pipe):
    here, there = pipe
    os.write(there.fileno(), (10).to_bytes(4, "big") + b"abc")  # 10 bytes announced, 3 sent
    there.close()
    with pytest.raises(OSError, match="within a message"):
        read_message(here.fileno())


@pytest.mark.timeout(30)
def test_writing_to_a_pipe_whose_reader_is_gone_raises_oserror(pipe):
    here, there = pipe
    there.close()
    with pytest.raises(OSError):
        write_message(here.fileno(), b"x" * 100)
