"""One process at a time makes a thing in the cache; another waits, then finds it made.

Two first uses at once (pytest-xdist's workers on a fresh cache, two first runs of a judge) each assembled a
built-in's GGUF at one path and converted it, and the first to finish removed the file, or replaced the folder,
that the other was still reading. The lock is ``flock`` on the folder the thing is made in, so no lock file is
left in the cache and the OS drops it when its holder dies; without ``flock`` (Windows) none is taken.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("logitjudge.cache")


@contextmanager
def one_maker(folder: Path, what: str, *, refuse: Callable[[OSError, Path], Exception]):
    """Holds the lock on ``folder`` (made if missing) for the block; ``what`` names the thing in the log line
    printed while another process holds it; a folder that cannot be made or opened raises ``refuse(error,
    folder)``."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY)
    except OSError as e:
        raise refuse(e, folder) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process that is making %s", what)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock
