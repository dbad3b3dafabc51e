"""Test doubles shared by the nested-host harness tests (tests/nested-host/
test_run.py) and the pool's nested bench tests (tests/pool/
test_nested_bench.py): both drive a console reader with scripted L2 lines."""

import queue
import time


class FakeConsole:
    """Console stand-in: yields scripted lines, then EOF (None) or, with
    eof=False, times out at the deadline like a silent L2."""

    def __init__(self, lines, eof=True):
        self.q = queue.Queue()
        for ln in lines:
            self.q.put(ln)
        if eof:
            self.q.put(None)

    def next(self, deadline):
        try:
            return self.q.get(timeout=max(0.0, min(deadline - time.monotonic(), 0.2)))
        except queue.Empty:
            raise TimeoutError from None
