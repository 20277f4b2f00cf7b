"""The CLI caps glibc's malloc arenas (advisor.cli.limit_malloc_arenas): threads that allocate share them."""
from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas")

# Eight threads allocate through glibc's malloc (bytearrays above pymalloc's 512 bytes) at once, then
# malloc_info counts the arenas (`<heap nr=...>` per arena).
PROGRAM = r"""
import ctypes, sys, tempfile, threading
if sys.argv[1] == "cli":
    import advisor.cli  # noqa: F401
barrier = threading.Barrier(8)
def allocate():
    barrier.wait()
    kept = [bytearray(4096) for _ in range(2000)]
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile(suffix=".xml") as out:
    handle = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(handle))
    libc.fclose(ctypes.c_void_p(handle))
    print(open(out.name).read().count("<heap nr="))
"""


def _arenas(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_threads_share_two_arenas_under_the_cli():
    if not hasattr(ctypes.CDLL(None), "malloc_info"):
        pytest.skip("not glibc")
    assert _arenas("plain") > 2  # glibc's default: an arena per thread (the test can tell)
    assert _arenas("cli") <= 2
