"""Build and load the C kernels for CPU (``cpu_*.c`` beside this file) with the system C compiler.

A source is compiled once per machine (``$CC``, else ``cc``/``gcc``: ``-O3 -march=native -fopenmp``, ~1 s, no
Python or torch headers; ``target`` names another ``-march``, e.g. ``x86-64-v3`` for an AVX2 build tested on an
AVX-512 machine; on ARM ``-mcpu=native``) into ``$LOGITJUDGE_KERNEL_CACHE`` (default
``$XDG_CACHE_HOME/logitjudge/kernels`` or ``~/.cache/logitjudge/kernels``), keyed by the source and the headers
beside it, the flags, the compiler's version and the CPU's feature flags (a ``-march=native`` build must not be
reused on another CPU), and loaded with ctypes. The OpenMP runtime it links is the libgomp torch has already
loaded (same SONAME), so both share one thread pool.

No compiler, a failed build (e.g. a compiler without OpenMP) or ``LOGITJUDGE_CPU_KERNELS=0`` -> :func:`load`
returns ``(None, why)``, a failed build logs one line, and the callers run their PyTorch references instead:
slower, never different numbers beyond the stated tolerances.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC")
TARGET = "native"  # the -march of the kernels the dispatcher runs
DISABLE_ENV = "LOGITJUDGE_CPU_KERNELS"
log = logging.getLogger(__name__)

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


def cpu_flags() -> str:
    """The CPU's feature flags line (x86 ``flags`` / ARM ``Features`` of ``/proc/cpuinfo``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def arch_flags(target: str = TARGET) -> tuple[str, ...]:
    """``-march=<target>`` (x86 and most others); ``-mcpu=native`` on ARM, where compilers take it more widely."""
    if target == "native" and platform.machine().lower() in ("aarch64", "arm64"):
        return ("-mcpu=native",)
    return (f"-march={target}",)


@cache
def load(source: Path, signatures: tuple, target: str = TARGET) -> tuple[ctypes.CDLL | None, str]:
    """(the library built from ``source`` for ``-march=target``, "") or (None, why not). ``signatures``: ((name,
    argtypes, restype), ...) of the functions to declare."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return None, f"disabled by {DISABLE_ENV}=0"
    cc = compiler()
    if cc is None:
        return None, "no C compiler found (set $CC, or install gcc)"
    source = Path(source)
    flags = (*FLAGS, *arch_flags(target))
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        headers = [h.read_text() for h in sorted(source.parent.glob("*.h"))]  # what the source may include
        key = hashlib.sha256("\0".join([source.read_text(), *headers, " ".join(flags), version,
                                        cpu_flags()]).encode())
        suffix = "" if target == TARGET else f"-{target}"
        built_so = cache_dir() / f"{source.stem}{suffix}-{key.hexdigest()[:16]}.so"
        if not built_so.exists():
            built_so.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=built_so.parent) as tmp:
                built = Path(tmp) / built_so.name
                run = subprocess.run([cc, *flags, str(source), "-o", str(built), "-lm"], capture_output=True,
                                     text=True, timeout=300)
                if run.returncode != 0:
                    why = f"{cc} failed to build {source.name}: {run.stderr.strip()[-500:]}"
                    log.warning("C kernel %s not built for %s (%s); the PyTorch reference runs instead",
                                source.name, platform.machine(), why.splitlines()[0][:200])
                    return None, why
                os.replace(built, built_so)  # atomic: concurrent builders each write their own temporary file
        lib = ctypes.CDLL(str(built_so))
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("C kernel %s not loaded (%s); the PyTorch reference runs instead", source.name, e)
        return None, f"could not build or load {source.name}: {e}"
    for name, argtypes, restype in signatures:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib, ""


def threads_for(work: int, min_work: int) -> int:
    """torch's thread count (one more inside a step raised while another process takes a core:
    :mod:`.spare_thread`), or 1 for a call under ``min_work``: an OpenMP region costs a fork and a join, and on a
    machine that other processes share, a join waits for a descheduled thread (milliseconds, not microseconds).
    Only for kernels whose results do not depend on the thread count they ran on (each output element computed
    by one thread, in a fixed order)."""
    return torch_threads() if work >= min_work else 1


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def ptr(t) -> ctypes._Pointer:
    """A float* to a tensor's data (the caller keeps the tensor alive for the call)."""
    return ctypes.cast(t.data_ptr(), f32p)
