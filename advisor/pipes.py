"""One-way pipes that carry pickled results with their arrays out of band: the workers' results to the main
process (advisor.stream).

With workers measuring a big log, the results (every request's token ids) are as large as the log, and
receiving them through a multiprocessing.Queue (the pipe's chunks joined in a BytesIO, its value taken,
each array rebuilt from it) took close to a third of the main process's stream time, the process that does
not spread. Here a result is pickled with protocol 5, so its contiguous arrays stay out of the pickle: the
sender writes them from their own memory and the receiver reads them straight into new arrays. On the 1 GB
log this took receiving from 0.88 s to about 0.7 s of the main thread; the rest is the kernel's copy
through the pipe and the new pages.

A frame: the pickle's length and its buffer count (two little-endian u64), each buffer's length (u64),
the pickle, then the buffers. The sender writes on a thread, so a process that sends ahead never blocks on
a receiver that is busy elsewhere (as Queue's feeder thread does).
"""
from __future__ import annotations

import fcntl
import os
import pickle
import queue
import struct
import threading
from typing import Any

import numpy as np

_COUNTS = struct.Struct("<QQ")
PIPE_BYTES = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size for an unprivileged process


class PipeClosed(EOFError):
    """The sending end closed (its process exited) before a whole frame came."""


class Sender:
    """The sending end, in the worker: `send` pickles and queues; a thread writes the frames in order."""

    def __init__(self, connection: Any):
        self._connection = connection  # kept open while the thread writes to its descriptor
        self._fd = connection.fileno()
        _widen(self._fd)
        self._frames: queue.SimpleQueue[tuple[bytes, list[pickle.PickleBuffer]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_frames, name="result-sender", daemon=True)
        self._thread.start()

    def send(self, value: Any) -> None:
        """Queues `value` (its arrays are written from their memory: the caller must not change them)."""
        buffers: list[pickle.PickleBuffer] = []
        header = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
        self._frames.put((header, buffers))

    def close(self) -> None:
        """Writes what is queued, then closes the pipe."""
        self._frames.put(None)
        self._thread.join()
        self._connection.close()

    def _write_frames(self) -> None:
        while (frame := self._frames.get()) is not None:
            header, buffers = frame
            raws = [buffer.raw() for buffer in buffers]
            sizes = struct.pack(f"<{len(raws)}Q", *(raw.nbytes for raw in raws))
            try:
                _write_all(self._fd, _COUNTS.pack(len(header), len(raws)) + sizes + header)
                for raw in raws:
                    _write_all(self._fd, raw)
            except BrokenPipeError:
                return  # the receiver is gone (it stopped the run): nothing to deliver


class Receiver:
    """The receiving end, in the main process: `receive` blocks for the next value; PipeClosed when the
    sender's process exited without sending it (every other copy of the sending end must be closed)."""

    def __init__(self, connection: Any):
        self._connection = connection
        self._fd = connection.fileno()

    def receive(self) -> Any:
        header_size, count = _COUNTS.unpack(self._read(_COUNTS.size))
        sizes = struct.unpack(f"<{count}Q", self._read(8 * count)) if count else ()
        header = self._read(header_size)
        buffers = []
        for size in sizes:
            buffer = np.empty(size, dtype=np.uint8)  # not zeroed: the read fills it
            self._read_into(memoryview(buffer))
            buffers.append(buffer)
        return pickle.loads(header, buffers=buffers)

    def close(self) -> None:
        self._connection.close()

    def _read(self, size: int) -> bytearray:
        buffer = bytearray(size)
        self._read_into(memoryview(buffer))
        return buffer

    def _read_into(self, view: memoryview) -> None:
        got = 0
        while got < view.nbytes:
            read = os.readv(self._fd, [view[got:]])
            if not read:
                raise PipeClosed("the sending process closed its pipe")
            got += read


def _widen(fd: int) -> None:
    """Gives the pipe PIPE_BYTES of buffer where the system allows it (Linux; 64 KiB by default): a result of
    a few MB then crosses in a few reads and switches instead of dozens. Receiving the 320 MB log's results
    on 3 workers took 0.145 s of the main thread instead of 0.18 s."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):  # not Linux, or over /proc/sys/fs/pipe-max-size: the default stays
        pass


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]
