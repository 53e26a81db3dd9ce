"""Which packages ship: every ``logitjudge`` package, found rather than listed (a new subpackage cannot be left out
of the wheel), and ``kernels/logitjudge_kernels/`` as ``logitjudge_kernels``. The top-level ``kernels/`` folder
holds no ``__init__.py`` and no module: Hugging Face's ``kernels`` package (imported by transformers while a model
loads) must never resolve to project code when the clone's root is on ``sys.path``. Everything else is in
pyproject.toml."""

from setuptools import find_namespace_packages, setup

# namespace packages too: the data folders (rubrics/, demo/) ship as packages with their files
packages = find_namespace_packages(include=["logitjudge", "logitjudge.*"], exclude=["*.__pycache__"])
setup(packages=[*packages, "logitjudge_kernels"],
      package_dir={"logitjudge_kernels": "kernels/logitjudge_kernels"})
