"""A release that stands alone (issue 54): the version written once, and the wheel and sdist that
``python -m build`` makes — with ``py.typed``, without the tests — installed into a fresh venv outside the
checkout, where ``plan-parallel plan`` runs the main job.
"""
from __future__ import annotations

import configparser
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import plan_parallel

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["setup.cfg", "pyproject.toml", "README.md", "PYPI.md", "CHANGELOG.md", "MANIFEST.in", "LICENSE"]


def test_the_version_is_written_once() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["metadata"]["version"] == "attr: plan_parallel.__version__"
    assert importlib.metadata.version("plan_parallel") == plan_parallel.__version__
    assert f"\n## {plan_parallel.__version__} " in (ROOT / "CHANGELOG.md").read_text()


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=400, env=env)
    assert r.returncode == 0, f"{cmd} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_built_wheel_installs_in_a_fresh_venv_and_runs_the_main_job(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy of the checkout's sources, tests and docs included: the build must leave them out
    src.mkdir()
    for name in SOURCES:
        shutil.copy(ROOT / name, src / name)
    for name in ("plan_parallel", "tests", "docs"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)], cwd=tmp_path)
    version = plan_parallel.__version__
    wheel = dist / f"plan_parallel-{version}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert "plan_parallel/py.typed" in names and "plan_parallel/__init__.py" in names
    assert {n.split("/")[0] for n in names} == {"plan_parallel", f"plan_parallel-{version}.dist-info"}, names
    sdist = [n.split("/", 1)[-1] for n in tarfile.open(dist / f"plan_parallel-{version}.tar.gz").getnames()]
    assert "plan_parallel/py.typed" in sdist and "CHANGELOG.md" in sdist and "LICENSE" in sdist and "PYPI.md" in sdist
    metadata = zipfile.ZipFile(wheel).read(f"plan_parallel-{version}.dist-info/METADATA").decode()
    assert "pip install \"plan_parallel[envs]\"" in metadata and "](docs/" not in metadata  # PyPI's page: PYPI.md
    assert f"plan_parallel-{version}.dist-info/licenses/LICENSE" in names  # the MIT text setup.cfg declares
    assert not [n for n in sdist if n.split("/")[0] in ("tests", "docs", "notebooks", "benchmarks")]

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path, env=env)
    where = run([str(venv / "bin" / "python"), "-c", "import plan_parallel as pp; print(pp.__file__, pp.__version__)"],
                cwd=tmp_path, env=env).stdout.split()
    assert Path(where[0]).is_relative_to(venv) and where[1] == version  # the installed copy, not the checkout
    played = run([str(venv / "bin" / "plan-parallel"), "plan", "CartPole-v1", "--max-steps", "20"], cwd=tmp_path, env=env)
    assert "mean return 20.0" in played.stdout, played.stdout[-2000:]
