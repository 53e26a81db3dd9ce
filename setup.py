"""Which packages ship: every ``logitjudge`` package, found rather than listed (a new subpackage cannot be left out
of the wheel), and the ``kernels/`` folder as ``logitjudge_kernels`` (transformers uses a package named
``kernels``). Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

# namespace packages too: the data folders (rubrics/, demo/) ship as packages with their files
packages = find_namespace_packages(include=["logitjudge", "logitjudge.*"], exclude=["*.__pycache__"])
setup(packages=[*packages, "logitjudge_kernels"],
      package_dir={"logitjudge_kernels": "kernels"})
