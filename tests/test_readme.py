"""Every Python block of the README, of PyPI's page (``PYPI.md``) and of the docs site's pages (``docs/``) runs as
written when pasted into a script (a new user's first hour).

Blocks that start with ``# needs a Ray cluster`` are only compiled.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PYPI = ROOT / "PYPI.md"
PAGES = [README, PYPI, *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [(page, code) for page in PAGES for code in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]
CLUSTER = "# needs a Ray cluster"


def block_id(k: int) -> str:
    page = BLOCKS[k][0]
    name = page.stem if page == README else page.relative_to(ROOT).with_suffix("").as_posix()
    return f"{name}-block{sum(1 for p, _ in BLOCKS[:k] if p == page)}"


def test_the_readme_and_the_docs_have_python_blocks() -> None:
    assert len([code for page, code in BLOCKS if page == README]) >= 3  # a batch, a planner, the vector env
    assert len(BLOCKS) >= 6


@pytest.mark.timeout(300)
@pytest.mark.parametrize("k", range(len(BLOCKS)), ids=[block_id(k) for k in range(len(BLOCKS))])
def test_block_runs_as_a_script(k: int, tmp_path: Path) -> None:
    page, code = BLOCKS[k]
    where = f"{page.relative_to(ROOT)} block {block_id(k)}"
    compile(code, where, "exec")
    if code.startswith(CLUSTER):
        pytest.skip("needs a Ray cluster: compiled only")
    script = tmp_path / "block.py"  # as pasted into a file: no main guard
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"{where} failed:\n{code}\n--- stderr ---\n{r.stderr[-4000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-4000:]


def test_ci_runs_the_readme_test_command() -> None:
    """``.ci/run`` runs each part of the README's test command (install, docs build, pytest), in that order."""
    (command,) = re.findall(r'^(pip install -e "\.\[test[\w,]*\]" && .+)$', README.read_text(), re.M)
    lines = [line.split("  #")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    found = []
    for part in command.split(" && "):
        at = [i for i, line in enumerate(lines) if part in (line, line.removeprefix("python -m "))]
        assert at, f".ci/run does not run {part!r} of the README's test command"
        found.append(at[0])
    assert found == sorted(found), ".ci/run runs the README's test command in another order"
    assert "mkdocs build --strict" in command  # the docs' warnings fail CI


def test_the_readmes_links_reach_a_file_and_its_heading() -> None:
    """The front page links into the docs site: each relative link names a file of the repository and, after
    ``#``, one of its headings (GitHub's and MkDocs' slugs: lower case, punctuation dropped, spaces as ``-``)."""
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", README.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path
        if not page.is_file():
            bad.append(target)
        elif anchor:
            headings = re.findall(r"^#+ (.*)$", page.read_text(), re.M)
            if anchor not in [re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings]:
                bad.append(target)
    assert not bad, f"README links to no such file or heading: {bad}"


def test_pypis_page_links_to_nothing_relative_and_shows_the_readmes_first_example() -> None:
    """PyPI renders the long description with no repository around it, so a relative link (README's ``docs/...``)
    would be broken there: the long description is ``PYPI.md``, whose links are absolute, and whose example is
    the README's first, word for word."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["metadata"]["long_description"] == "file: PYPI.md"
    text = PYPI.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"(?:href|src)=[\"']([^\"']+)", text)
    assert links and all(t.startswith("https://") for t in links), links
    (example,) = re.findall(r"```python\n(.*?)```", text, re.S)
    assert example == re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
