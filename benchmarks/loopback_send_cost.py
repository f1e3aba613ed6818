"""What one token event costs the kernel: a small ``send()`` on a loopback TCP connection.

The lean fake writes every token event with one ``transport.write`` — one ``send()`` on that
stream's socket. On loopback the sending CPU also runs the receiving side's TCP processing, so
this cost, not Python, sets the fake's floor per event. This script measures it alone: ``--conns``
connected loopback pairs, a drain process pinned to CPU 0 reading all of them (epoll), and this
process pinned to CPU 1 sending ``--bytes``-byte messages round-robin across the connections,
timed with ``perf_counter_ns`` around the send loop; a plain Python loop of the same shape without
the ``send()`` is timed too, so the syscall's share is printed apart from the loop's.

Run: ``.venv/bin/python benchmarks/loopback_send_cost.py [--conns 2000] [--sends 200000]``
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import socket
import sys
import time


def drain(listener: socket.socket, n: int) -> None:
    os.sched_setaffinity(0, {0})
    sel = selectors.DefaultSelector()
    conns = []
    for _ in range(n):
        c, _ = listener.accept()
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ)
        conns.append(c)
    while True:
        for key, _ in sel.select(1.0):
            try:
                if not key.fileobj.recv(1 << 16):  # type: ignore[union-attr]
                    return
            except BlockingIOError:
                pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conns", type=int, default=2000)
    ap.add_argument("--sends", type=int, default=200_000)
    ap.add_argument("--bytes", type=int, default=330, help="a vLLM completions token event with chunk framing is ~330 B")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * a.conns + 64)), hard))
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(a.conns)
    pid = os.fork()
    if pid == 0:
        drain(lst, a.conns)
        os._exit(0)
    os.sched_setaffinity(0, {1})
    socks = []
    for _ in range(a.conns):
        s = socket.create_connection(lst.getsockname())
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    msg = b"x" * a.bytes
    sends = [s.send for s in socks]
    k = len(sends)
    time.sleep(0.5)
    t0 = time.perf_counter_ns()
    for i in range(a.sends):
        sends[i % k](msg)
    t1 = time.perf_counter_ns()
    noop = [len for _ in socks]
    t2 = time.perf_counter_ns()
    for i in range(a.sends):
        noop[i % k](msg)
    t3 = time.perf_counter_ns()
    for s in socks:
        s.close()
    os.waitpid(pid, 0)
    per = (t1 - t0) / a.sends / 1e3
    loop = (t3 - t2) / a.sends / 1e3
    print(f"loopback send of {a.bytes} B over {a.conns} connections: {per:.2f} us per send "
          f"({per - loop:.2f} us of it the syscall and the kernel's TCP work, {loop:.2f} us the Python loop)")
    print(f"  at 2,000 streams x 25 events/s (50,000 sends/s) that is {50_000 * per / 1e4:.0f} % of one core")


if __name__ == "__main__":
    sys.exit(main())
