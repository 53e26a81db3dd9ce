"""Build and load the C kernels for CPU (``cpu_*.c`` beside this file) with the system C compiler.

A source is compiled once per machine (``$CC``, else ``cc``/``gcc``: ``-O3 -march=native -fopenmp``, ~1 s, no
Python or torch headers) into ``$LOGITJUDGE_KERNEL_CACHE`` (default ``$XDG_CACHE_HOME/logitjudge/kernels`` or
``~/.cache/logitjudge/kernels``), keyed by the source and the headers beside it, the flags, the compiler's
version and the CPU's feature flags (a ``-march=native`` build must not be reused on another CPU), and loaded
with ctypes. The OpenMP runtime it links is the libgomp torch has already loaded (same SONAME), so both share
one thread pool.

No compiler, a failed build or ``LOGITJUDGE_CPU_KERNELS=0`` -> :func:`load` returns ``(None, why)`` and the
callers run their PyTorch references instead: slower, never different numbers beyond the stated tolerances.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
DISABLE_ENV = "LOGITJUDGE_CPU_KERNELS"

f32p = ctypes.POINTER(ctypes.c_float)
i64, f32, c_int = ctypes.c_int64, ctypes.c_float, ctypes.c_int


def cache_dir() -> Path:
    if os.environ.get("LOGITJUDGE_KERNEL_CACHE"):
        return Path(os.environ["LOGITJUDGE_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "logitjudge" / "kernels"


def compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc"):
        if cc and shutil.which(cc):
            return cc
    return None


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def load(source: Path, signatures: tuple) -> tuple[ctypes.CDLL | None, str]:
    """(the library built from ``source``, "") or (None, why not). ``signatures``: ((name, argtypes, restype),
    ...) of the functions to declare."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return None, f"disabled by {DISABLE_ENV}=0"
    cc = compiler()
    if cc is None:
        return None, "no C compiler found (set $CC, or install gcc)"
    source = Path(source)
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        headers = [h.read_text() for h in sorted(source.parent.glob("*.h"))]  # what the source may include
        key = hashlib.sha256("\0".join([source.read_text(), *headers, " ".join(FLAGS), version,
                                        _cpu_flags()]).encode())
        target = cache_dir() / f"{source.stem}-{key.hexdigest()[:16]}.so"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                built = Path(tmp) / target.name
                run = subprocess.run([cc, *FLAGS, str(source), "-o", str(built), "-lm"], capture_output=True,
                                     text=True, timeout=300)
                if run.returncode != 0:
                    return None, f"{cc} failed to build {source.name}: {run.stderr.strip()[-500:]}"
                os.replace(built, target)  # atomic: concurrent builders each write their own temporary file
        lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"could not build or load {source.name}: {e}"
    for name, argtypes, restype in signatures:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib, ""


def ptr(t) -> ctypes._Pointer:
    """A float* to a tensor's data (the caller keeps the tensor alive for the call)."""
    return ctypes.cast(t.data_ptr(), f32p)
