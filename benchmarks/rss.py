"""Peak resident memory of one call, sampled every 5 ms from /proc/self/status (Linux), for the benchmarks."""

from __future__ import annotations

import gc
import threading
import time


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def measured(fn):
    """(result, seconds, peak RSS above the starting RSS in MiB) of fn()."""
    gc.collect()
    base = rss_bytes()
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.005)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    try:
        out = fn()
    finally:
        secs = time.perf_counter() - t0
        stop.set()
        th.join()
    return out, secs, (peak[0] - base) / 2 ** 20
