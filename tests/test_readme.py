"""Every Python block of the README runs as written when pasted into a script (a new user's first hour).

Blocks that start with ``# needs a Ray cluster`` are only compiled.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
CLUSTER = "# needs a Ray cluster"


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 6


@pytest.mark.timeout(300)
@pytest.mark.parametrize("k", range(len(BLOCKS)), ids=[f"block{k}" for k in range(len(BLOCKS))])
def test_block_runs_as_a_script(k: int, tmp_path: Path) -> None:
    code = BLOCKS[k]
    compile(code, f"README block {k}", "exec")
    if code.startswith(CLUSTER):
        pytest.skip("needs a Ray cluster: compiled only")
    script = tmp_path / f"block{k}.py"  # as pasted into a file: no main guard
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"README block {k} failed:\n{code}\n--- stderr ---\n{r.stderr[-4000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-4000:]
