"""The C kernels built for another CPU than this one: aarch64 (NEON, 4-float tiles), cross-compiled and run under
qemu where ``aarch64-linux-gnu-gcc`` and ``qemu-aarch64`` are installed, against plain fp64 loops
(``cpu_kernels_harness.c``); and the same harness on this machine's native build. Python cannot load a foreign
build, so the harness calls the kernels' C entry points directly."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from logitjudge_kernels import _cbuild

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "kernels" / "logitjudge_kernels" / f"{k}.c" for k in ("cpu_readout", "cpu_attention", "cpu_norm")]
HARNESS = Path(__file__).with_name("cpu_kernels_harness.c")
QEMU_SYSROOT = "/usr/aarch64-linux-gnu"

BUILDS = {  # name -> (compiler, kernel flags, runner prefix, expected vector width)
    "native": (_cbuild.compiler(), list(_cbuild.arch_flags("native")), [], None),
    "aarch64-qemu": ("aarch64-linux-gnu-gcc", ["-mcpu=neoverse-n1"], ["qemu-aarch64", "-L", QEMU_SYSROOT], 4),
}


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_kernels_match_fp64_loops(build, tmp_path):
    cc, flags, runner, width = BUILDS[build]
    if not cc or not shutil.which(cc) or (runner and not shutil.which(runner[0])):
        pytest.skip(f"{build}: needs {cc or 'a C compiler'}" + (f" and {runner[0]}" if runner else ""))
    objects = []
    for src in SOURCES:  # the kernels as _cbuild builds them; the harness plainly (GCC 12's aarch64 -O3 trips on it)
        obj = tmp_path / f"{src.stem}.o"
        subprocess.run([cc, "-O3", "-fopenmp", "-fPIC", *flags, "-c", str(src), "-o", str(obj)], check=True,
                       capture_output=True)
        objects.append(str(obj))
    exe = tmp_path / "harness"
    subprocess.run([cc, "-O1", "-fopenmp", str(HARNESS), *objects, "-lm", "-o", str(exe)], check=True,
                   capture_output=True)
    run = subprocess.run([*runner, str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{build}: {run.stdout} {run.stderr[-500:]}"
    fields = run.stdout.split()
    got = dict(zip(fields[::2], fields[1::2]))
    if width is not None:
        assert int(got["vector_width"]) == width
    assert {"readout", "attention", "rms_norm"} <= set(got)
