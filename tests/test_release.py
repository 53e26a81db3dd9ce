"""A release is what ``pip install`` gives: the sdist and the wheel built from this tree (the wheel from the sdist,
as ``python -m build`` does), the wheel installed into a folder outside the source tree, and its CLI run from
there on two texts with the built-in judge. A package missing from the wheel fails here, not on a user's
machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("score", "analyze", "run", "demo", "probe")


def _run(cmd, *, cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd} exited {res.returncode}:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
    return res


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """The sdist and the wheel built from it (no network: the build runs in this environment)."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT], cwd=out)
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory) -> tuple[Path, dict]:
    """The wheel installed (without dependencies: they are this environment's) into a folder of its own; the
    environment that makes Python find it there first and never in the source tree."""
    target = tmp_path_factory.mktemp("site")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", target, dists["wheel"]],
         cwd=target)
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONSAFEPATH": "1"}
    return target, env


def _source_packages() -> set[str]:
    """Every folder of the source tree that holds Python modules, as the package it installs as."""
    pkgs = {str(p.parent.relative_to(ROOT)).replace("/", ".") for p in (ROOT / "logitjudge").rglob("*.py")}
    return pkgs | {"logitjudge_kernels"}


def test_wheel_holds_every_package_and_data_file(dists):
    names = zipfile.ZipFile(dists["wheel"]).namelist()
    folders = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith(".py")}
    assert _source_packages() <= folders, f"missing from the wheel: {_source_packages() - folders}"
    for data in ("logitjudge/rubrics/hanna.toml", "logitjudge/demo/texts.jsonl",
                 "logitjudge/templates/text-first.toml", "logitjudge_kernels/cpu_attention.c",
                 "logitjudge_kernels/cpu_tiles.h"):
        assert data in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = zipfile.ZipFile(dists["wheel"]).read(meta).decode()
    assert "Requires-Dist: huggingface_hub" in requires and 'tomli>=1.1; python_version < "3.11"' in requires


def test_sdist_holds_the_tests_and_sources(dists):
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for need in ("setup.py", "pyproject.toml", "Makefile", "tests/conftest.py", "tests/test_release.py",
                 "kernels/logitjudge_kernels/cpu_readout.c", "benchmarks/workloads.py",
                 "logitjudge/rubrics/default.toml"):
        assert need in names, need


def test_installed_wheel_imports_from_its_own_folder(installed, tmp_path):
    target, env = installed
    code = ("import logitjudge, logitjudge_kernels, logitjudge.cli; "
            "print(logitjudge.__file__, logitjudge_kernels.__file__)")
    res = _run([sys.executable, "-c", code], cwd=tmp_path, env=env)
    for path in res.stdout.split():
        assert Path(path).is_relative_to(target), res.stdout


def test_installed_cli_version_help_score_and_analyze(installed, tmp_path):
    target, env = installed
    cli = target / "bin" / "logitjudge"
    from logitjudge import __version__

    assert _run([cli, "--version"], cwd=tmp_path, env=env).stdout.strip() == f"logitjudge {__version__}"
    for cmd in COMMANDS:
        assert "usage: logitjudge " + cmd in _run([cli, cmd, "--help"], cwd=tmp_path, env=env).stdout
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(
        ["The council approved the budget on Tuesday after a long debate.", "budget yes. money maybe."])))
    _run([cli, "score", "--model", "gemma-3-270m", "--texts", texts, "--out", tmp_path / "t.npz", "--quiet",
          "--threads", "2"], cwd=tmp_path, env=env)
    res = _run([cli, "analyze", tmp_path / "t.npz", "--json", "--n-boot", "50"], cwd=tmp_path, env=env)
    assert "verdict" in json.loads(res.stdout)
