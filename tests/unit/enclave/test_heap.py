"""The enclave's heap gives freed case buffers back: after a case's buffers of 1 MiB and more are
freed, the process's resident memory falls back, instead of glibc keeping them for the next case
(the peak of 4 full-size BraTS cases grew by 130 MiB that way)."""

from __future__ import annotations

import subprocess
import sys

PROBE = r"""
import sys
from pathlib import Path
import numpy as np
from sealbench.enclave.heap import return_freed_buffers

def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10

if sys.argv[1] == "fixed":
    assert return_freed_buffers()
big = np.ones(16 << 20, dtype=np.uint8)  # freed, it raises glibc's threshold to 16 MiB
del big
before = rss()
# a case's worth of 4 MiB buffers, then all freed: what a heap keeps stays resident
buffers = [np.ones(4 << 20, dtype=np.uint8) for _ in range(40)]
del buffers[:-1]
print(rss() - before)
"""


def _kept(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True, timeout=60)
    return int(out.stdout)


def test_freed_case_buffers_leave_the_process() -> None:
    assert _kept("fixed") < 16 << 20
    assert _kept("default") > 100 << 20  # the probe does see what glibc keeps by default
