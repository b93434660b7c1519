"""A short coverage-guided fuzz run (atheris) of the decoders and the hub's core, in the suite.

The long run is a command (``python -m tests.support.fuzz_decoders -max_total_time=600``,
docs/reliability.md); this one proves the target runs and holds for some 30,000 inputs,
starting from one valid frame of every opcode.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from tests.support.hubprocess import ROOT


def test_decoders_and_core_hold_under_a_short_fuzz_run(tmp_path: Path) -> None:
    from tests.support.fuzz_decoders import seeds

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for seed in seeds():
        (corpus / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.fuzz_decoders", "-runs=30000", "-timeout=5", "-seed=1",
         f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Done 30000 runs" in run.stderr
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*"))
