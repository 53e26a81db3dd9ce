"""logitjudge's benchmarks, a package: run each script from the repository root as ``python -m benchmarks.NAME``
(``python -m benchmarks.peers --quick``), so that the root, not this folder, is on ``sys.path`` and no module here
can shadow an installed package (Hugging Face's ``kernels``, imported by transformers while a model loads).

Scripts (each has a ``main`` and a ``__main__`` guard) import only the library modules, never each other:

* :mod:`.workloads`: the shared prompts and the one judge-and-workload loader (:func:`.workloads.load`);
* :mod:`.timing`: the one timing helper, best of interleaved rounds with its spread;
* :mod:`.judge_model`: what ``--model`` names (checkpoint, GGUF) and the judge's FLOP-floor shapes;
* :mod:`.floor`: the floor's matmul rate, FMA peak and work; :mod:`.child`: a script's run in a child process
  with a time limit, a crash or a timeout told as a cell;
* :mod:`.peers_table`, :mod:`.findings`, :mod:`.cpu_kernels`, :mod:`.rss`: the parts of one script each.

Every script runs under the CLI's OpenMP wait policy (PASSIVE, ``logitjudge/_openmp.py``): the package imports
logitjudge before any script can import torch (directly or through ``logitjudge_kernels``), since libgomp reads
the policy once, when torch loads. Scripts that imported torch first ran under libgomp's default (spinning ~3 ms
at each barrier): quiet within 2%, beside a busy process up to 1.45x slower (docs/performance.md).
"""

import logitjudge  # noqa: F401  (sets the policy; it does not load torch)
