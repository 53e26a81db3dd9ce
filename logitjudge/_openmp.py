"""OpenMP's idle worker threads sleep instead of spinning (issue 55).

Beside another busy process, threads that spin at every barrier take the core that the thread they wait for needs:
with one core of two held by another process, a run slowed ~3x with the default policy. libgomp reads
``OMP_WAIT_POLICY`` once, when torch loads, so the package sets it on import, before any module imports torch
(``logitjudge/__init__.py`` imports this first). A policy the user exported is kept (``OMP_WAIT_POLICY=ACTIVE``
brings spinning back); a process that imported torch before logitjudge keeps the policy it started with.
"""

import os

OMP_WAIT_POLICY_GIVEN = os.environ.get("OMP_WAIT_POLICY")  # the user's own, or None
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
