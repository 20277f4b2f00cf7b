"""advisor.pipes: results cross processes whole, arrays out of band; a sender that dies ends the pipe."""
import multiprocessing
import os
import signal

import numpy as np
import pytest

from advisor import pipes, stream
from advisor.ingest import read_parts

FORK = multiprocessing.get_context("fork")


def _send_then_exit(connection, values, code):
    sender = pipes.Sender(connection)
    for value in values:
        sender.send(value)
    sender.close()
    os._exit(code)


def _start(values, code=0):
    reader, writer = FORK.Pipe(duplex=False)
    process = FORK.Process(target=_send_then_exit, args=(writer, values, code))
    process.start()
    writer.close()  # only the child holds the sending end
    return pipes.Receiver(reader), process


def test_values_and_arrays_arrive_whole_and_in_order():
    big = np.arange(3_000_000, dtype=np.int32)  # larger than a pipe's buffer: written in many pieces
    values = [
        ("ok", {"ids": big, "empty": np.empty(0, dtype=np.uint64), "strided": big[::7], "grid": big[:12].reshape(3, 4)}),
        ("error", ValueError("bad line")),
        [np.float64(1.5), "text", None],
    ]
    receiver, process = _start(values)
    first = receiver.receive()
    assert first[0] == "ok"
    for key, expected in values[0][1].items():
        np.testing.assert_array_equal(first[1][key], expected)
        assert first[1][key].dtype == expected.dtype and first[1][key].shape == expected.shape
    first[1]["ids"][0] = -1  # the received arrays are the receiver's own, writable
    status, error = receiver.receive()
    assert status == "error" and isinstance(error, ValueError) and str(error) == "bad line"
    assert receiver.receive() == values[2]
    with pytest.raises(pipes.PipeClosed):
        receiver.receive()
    process.join()
    receiver.close()


def test_a_sender_that_dies_ends_the_pipe():
    receiver, process = _start([("ok", 1)], code=9)
    assert receiver.receive() == ("ok", 1)
    with pytest.raises(pipes.PipeClosed):
        receiver.receive()
    process.join()
    assert process.exitcode == 9
    receiver.close()


def test_a_worker_that_dies_stops_the_collection(tmp_path, monkeypatch):
    """A worker killed while it measures (out of memory, a signal) is reported, not waited for."""
    path = tmp_path / "log.jsonl"
    path.write_text("".join(f'{{"prompt": "question {i}", "completion": "answer {i}"}}\n' for i in range(600)))

    def dies(*args, **kwargs):
        os._exit(137)

    def hung(*args):
        raise TimeoutError("the collection waited for a dead worker")

    monkeypatch.setattr(stream, "_measure_chunk", dies)  # the forked workers inherit it
    options = stream.StreamOptions(tokenizer=None, model=None, block_size=16, hash_block_size=512, seed=0)
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)  # a hang fails the test instead of the CI run
    try:
        with pytest.raises(RuntimeError, match="exited with code 137"):
            stream.collect(read_parts([str(path)]), options, {}, workers=2)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
