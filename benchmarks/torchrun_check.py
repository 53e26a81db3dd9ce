"""Two torchrun ranks on two GPUs: each rank loads the judge on its own GPU and the gathered table is whole.

Builds the tests' tiny random Gemma-3 (tests/conftest.py) in a temporary folder, scores 6 texts with
``torchrun --standalone --nproc_per_node 2 -m logitjudge score --device cuda`` and checks that rank 0 ran on
``cuda:0`` and rank 1 on ``cuda:1`` (their log lines) and that the table has every item and ``world_size`` 2.
Exit 0 when it holds, 1 when not; 0 with a "skipped" line on a machine with fewer than 2 GPUs.

    .venv/bin/python -m benchmarks.torchrun_check
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    import torch

    if torch.cuda.device_count() < 2:
        print(f"skipped: {torch.cuda.device_count()} GPU(s); the check needs 2")
        return 0
    from logitjudge.table import ScoreTable
    from tests.conftest import tiny_gemma, tiny_tokenizer  # the root is on sys.path: python -m benchmarks.X

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tok = tiny_tokenizer()
        tiny_gemma(tok).save_pretrained(tmp / "model")
        tok.save_pretrained(tmp / "model")
        texts = tmp / "texts.jsonl"
        texts.write_text("".join(json.dumps({"id": f"t{i}", "text": f"Text number {i}: the cat sat on the mat."})
                                 + "\n" for i in range(6)))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "logitjudge", "score", "--model", str(tmp / "model"), "--texts", str(texts), "--device", "cuda",
               "--out", str(tmp / "t.npz")]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        print(res.stderr[-3000:])
        ok = res.returncode == 0
        for rank in (0, 1):
            line = f"rank {rank}: judge on cuda:{rank}"
            print(f"{line}: {'seen' if line in res.stderr else 'MISSING'}")
            ok &= line in res.stderr
        if res.returncode == 0:
            t = ScoreTable.load(tmp / "t.npz")
            print(f"table: {t.n_items} items, world_size {t.meta.get('world_size')}, device {t.meta.get('device')}")
            ok &= t.n_items == 6 and t.meta.get("world_size") == 2
    print("two ranks on two GPUs:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
