"""What waking W sleeping Python workers costs the caller: W pipe writes (one header each) against one eventfd
write that every worker sees through its own edge-triggered epoll (a "doorbell": the headers would then sit in
shared memory). Each worker answers on a pipe of its own, so the caller sees when every one of them woke.

    python benchmarks/lean_path/broadcast.py        # Linux (os.eventfd, select.epoll); ~10 s

Prints, for W = 2, 8 and 32, the caller's CPU (``time.thread_time``) for the writes and the wall time until every
worker answered (medians of 200 rounds, every worker asleep at the start of each). Figures and what they decided:
``docs/measurements.md``, *ALE states as rows, screens lent*.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import select
import statistics
import time

HEADER = b"x" * 35  # a lane header's size


def worker_pipe(down: int, up: int) -> None:
    while True:
        data = os.read(down, 64)
        if not data or data == b"q":
            return
        os.write(up, b"a")


def worker_doorbell(bell: int, up: int, down: int) -> None:
    ep = select.epoll()
    ep.register(bell, select.EPOLLIN | select.EPOLLET)  # every write is an edge each epoll sees once
    ep.register(down, select.EPOLLIN)  # (the caller's "quit")
    while True:
        events = ep.poll()
        if any(fd == down for fd, _ in events):
            return
        os.write(up, b"a")


def run(n_workers: int, mode: str, rounds: int = 200) -> tuple[float, float]:
    """Median caller CPU (µs) to wake every worker, and median wall (µs) until every one answered."""
    bell = os.eventfd(0, os.EFD_NONBLOCK) if mode == "doorbell" else -1
    procs, ups, downs = [], [], []
    for _ in range(n_workers):
        r_up, w_up = os.pipe()
        r_down, w_down = os.pipe()
        target, args = (worker_pipe, (r_down, w_up)) if mode == "pipe" else (worker_doorbell, (bell, w_up, r_down))
        p = mp.Process(target=target, args=args)
        p.start()
        procs.append(p)
        ups.append(r_up)
        downs.append(w_down)
    poll = select.poll()
    for fd in ups:
        poll.register(fd, select.POLLIN)
    time.sleep(0.5)
    cpu, wall = [], []
    for _ in range(rounds):
        time.sleep(0.003)  # every worker asleep again
        c0, w0 = time.thread_time(), time.perf_counter()
        if mode == "pipe":
            for fd in downs:
                os.write(fd, HEADER)
        else:
            os.eventfd_write(bell, 1)
        c1 = time.thread_time()
        answered = 0
        while answered < n_workers:
            for fd, _ in poll.poll():
                answered += len(os.read(fd, 64))
        w1 = time.perf_counter()
        if mode == "doorbell":
            try:
                os.eventfd_read(bell)
            except BlockingIOError:
                pass
        cpu.append((c1 - c0) * 1e6)
        wall.append((w1 - w0) * 1e6)
    for fd in downs:
        os.write(fd, b"q")
    for p in procs:
        p.join()
    return statistics.median(cpu), statistics.median(wall)


if __name__ == "__main__":
    mp.set_start_method("fork")
    for w in (2, 8, 32):
        for how in ("pipe", "doorbell"):
            c, t = run(w, how)
            print(f"W={w:2d} {how:8s}: caller CPU to wake them all {c:7.1f} us, until all answered {t:7.1f} us")
