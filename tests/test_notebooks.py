"""Every notebook in notebooks/ runs top to bottom without a cell error (tiny budgets: PP_NOTEBOOK_QUICK=1)."""
from __future__ import annotations

import configparser
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 120  # seconds per cell


def test_there_are_notebooks() -> None:
    assert [p.name for p in NOTEBOOKS][:3] == ["01_quickstart.ipynb", "02_mcts.ipynb", "03_scaling.ipynb"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("PP_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The kernel is stopped without running its exit handlers, so multiprocessing's forkserver socket
    # directory (pymp-*) it made stays behind: in the test's own directory, not in /tmp.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError (with the cell and its traceback) when a cell fails
    if path.name == "03_scaling.ipynb":  # its verdicts are computed from its own measurements
        printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
        assert re.search(r"process W=2 was (faster than|slower than|on par with) inline \(\d+\.\d\dx", printed), printed


def test_the_readme_names_every_notebook_and_its_extra_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    for path in NOTEBOOKS:
        assert f"notebooks/{path.name}" in readme
    (extra,) = re.findall(r'pip install -e "\.\[(\w+)\]" && jupyter lab notebooks/', readme)
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    wanted = cfg["options.extras_require"][extra].split()
    assert any(w.startswith("jupyter") for w in wanted) and any(w.startswith("ipykernel") for w in wanted)
