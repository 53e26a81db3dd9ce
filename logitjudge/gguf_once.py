"""One parse of a GGUF file's metadata for the three reads transformers makes of it in a conversion.

transformers' legacy GGUF loader (``modeling_gguf_pytorch_utils.load_gguf_checkpoint``: every architecture its
fast reader does not cover, Gemma-3 included under 5.19) builds a ``gguf.GGUFReader`` of the whole file on each
call, and a conversion calls it three times: for the tokenizer's config, for the model's config and for the
weights. The reader parses every element of the vocabulary arrays into Python objects (~2.4 M calls for
Gemma-3-270M's 262k tokens), ~10 s a parse on one core: two thirds of a conversion's parsing was repeated work.
:func:`one_reader` hands every ``GGUFReader(path)`` made inside it the reader made first for that file. The reader
is read-only (a ``np.memmap`` in mode ``"r"``; the loader only reads its fields and de-quantises copies of its
tensors), so the folder written is the same, byte for byte.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

_lock = threading.RLock()  # one conversion at a time swaps the name (a second waits: it would parse anyway)


@contextmanager
def one_reader():
    """Within the block, ``gguf.GGUFReader(path)`` (mode ``"r"``) returns one shared reader per file; readers in
    another mode are made as before. The ``gguf`` module's own name is restored on exit, and the readers (their
    memory maps) are let go."""
    try:
        import gguf
    except ImportError:  # transformers says what is missing when it loads the file
        yield
        return
    real = gguf.GGUFReader
    readers: dict = {}

    def shared(path, mode="r"):
        if mode != "r":
            return real(path, mode)
        key = os.path.realpath(path)
        if key not in readers:
            readers[key] = real(path, mode)
        return readers[key]

    with _lock:
        gguf.GGUFReader = shared
        try:
            yield
        finally:
            gguf.GGUFReader = real
            readers.clear()
