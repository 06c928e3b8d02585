"""A writer for the FIFOs of the bad-input tests: a command that wrongly opens a FIFO gets a file and fails its
case instead of waiting for a writer forever."""

from __future__ import annotations

import os
import threading


class FifoFeeder:
    """Writes ``payload`` (empty: nothing, the reader sees an empty file) into each FIFO of ``paths`` whenever a
    reader opens it, so that a command that reads a FIFO gets a file (and the case fails) instead of waiting for a
    writer forever; ``opened`` counts the readers served. Stops when the block ends."""

    def __init__(self, paths, payload: bytes = b""):
        self.paths, self.payload, self.stop = list(paths), payload, threading.Event()
        self.opened = 0

    def _run(self):
        while not self.stop.is_set():
            fd = None
            for path in self.paths:
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO until a reader opens it
                    break
                except OSError:
                    continue
            if fd is None:
                self.stop.wait(0.02)
                continue
            self.opened += 1
            try:
                self._write(fd)
            finally:
                os.close(fd)

    def _write(self, fd):
        # non-blocking, so that a reader that stops reading without closing (a refused file left for the garbage
        # collector) cannot hold this thread, and the test with it, forever: the block's end stops the writing
        view = memoryview(self.payload)
        while view and not self.stop.is_set():
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                self.stop.wait(0.01)
            except OSError:
                return

    def __enter__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the FIFO feeder did not stop"
