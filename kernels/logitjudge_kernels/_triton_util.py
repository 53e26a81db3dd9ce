"""Availability checks shared by the Triton kernels.

Triton is optional: it is absent on macOS/ARM and on CPU-only installs. Every kernel module imports
``triton`` through :data:`triton` / :data:`tl` from here, which are ``None`` when it cannot be imported,
and defines its ``@triton.jit`` kernels only when :data:`HAS_TRITON` is true.

The Triton interpreter (``TRITON_INTERPRET=1``) runs kernels with NumPy on CPU tensors. It only takes
effect when the variable is set *before* ``triton`` is first imported (``@triton.jit`` picks the
interpreter at decoration time), so tests run it in a subprocess.
"""

from __future__ import annotations

import os

import torch

try:  # pragma: no cover - depends on the platform
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover
    triton = None
    tl = None
    HAS_TRITON = False

BACKENDS = ("auto", "ref", "triton")


def interpreter_active() -> bool:
    """True when Triton kernels in this process run through the CPU interpreter."""
    if not HAS_TRITON:
        return False
    try:
        return bool(triton.knobs.runtime.interpret)
    except AttributeError:  # older triton without knobs
        return os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_usable(device: torch.device) -> bool:
    """Whether the Triton kernels can run on tensors living on ``device``."""
    if not HAS_TRITON:
        return False
    if interpreter_active():
        return device.type == "cpu"
    return device.type == "cuda" and torch.cuda.is_available()


def resolve_backend(backend: str, device: torch.device, *, supported: bool = True) -> str:
    """Map ``backend`` ("auto" | "ref" | "triton") to the concrete path for tensors on ``device``.

    ``auto`` picks Triton on CUDA (never the interpreter: it is a testing tool, far slower than the
    reference) when ``supported`` holds for the inputs; otherwise the PyTorch reference.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "ref":
        return "ref"
    if backend == "auto":
        use = supported and device.type == "cuda" and triton_usable(device)
        return "triton" if use else "ref"
    if not HAS_TRITON:
        raise RuntimeError("backend='triton' requested but triton is not installed")
    if not triton_usable(device):
        raise RuntimeError(
            f"backend='triton' needs CUDA tensors (or CPU tensors with TRITON_INTERPRET=1 set before "
            f"triton is imported); got tensors on {device}"
        )
    return "triton"


def check_same_device_dtype(named: dict[str, torch.Tensor], *, dtypes: tuple[torch.dtype, ...]) -> None:
    """Raise ValueError unless all tensors share one device and one floating dtype out of ``dtypes``."""
    items = list(named.items())
    name0, t0 = items[0]
    for name, t in items[1:]:
        if t.device != t0.device:
            raise ValueError(
                f"{name} is on {t.device} but {name0} is on {t0.device}; all must share a device"
            )
        if t.dtype != t0.dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but {name0} has {t0.dtype}; all must share a dtype")
    if t0.dtype not in dtypes:
        raise ValueError(f"{name0} has dtype {t0.dtype}; supported: {', '.join(map(str, dtypes))}")


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())
