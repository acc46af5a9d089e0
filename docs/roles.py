"""The docs build's reading of the package's Sphinx roles: a Griffe extension (``mkdocs.yml``).

The docstrings cross-reference with Sphinx roles (``:class:`~plan_parallel.state.State```), written for
``help()``, which shows them as they are. In the API reference each role becomes a link to the name's entry
when the reference documents it, and inline code otherwise (an optional cross-reference: no warning when the
name has no entry). ``~`` shows the last part of the dotted name only, as Sphinx does.

Pending, to be removed: a ``Raises:`` entry written as a sentence instead of ``Type: description`` is listed
as ``Exception: <the sentence>`` in the docstrings of :data:`UNTYPED_RAISES` only (each is to get its real
types at the source; Griffe would drop such an entry with a warning). Any other docstring with such an entry
fails ``mkdocs build --strict``.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ["UNTYPED_RAISES", "SphinxRoles"]

ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):`(~?)([\w.]+)(?:\(\))?`")
SECTION = re.compile(r"^(\s*)(\w[\w ]*):\s*$")
ENTRY = re.compile(r"^[\w.]+(?:\s*(?:,|/|or)\s*[\w.]+)*:(?:\s|$)")

# The docstrings (Griffe paths) whose Raises section still has an entry without a type. Remove a path when
# its docstring is fixed, and this set with sentences_as_exceptions when it is empty.
UNTYPED_RAISES = frozenset({
    "plan_parallel.batch.batch_env.BatchEnv.step_batch",
    "plan_parallel.batch.future.BatchFuture.result",
})


def as_autoref(match: re.Match[str]) -> str:
    short, path = match.group(1), match.group(2)
    title = path.rsplit(".", 1)[-1] if short else path
    return f'<autoref identifier="{path}" optional><code>{title}</code></autoref>'


def sentences_as_exceptions(text: str) -> str:
    """Prefix ``Exception:`` to each line of a Raises section that starts an entry without a type."""
    lines = text.splitlines()
    section_indent: str | None = None
    entry_indent: str | None = None
    for i, line in enumerate(lines):
        heading = SECTION.match(line)
        if heading:
            section_indent = heading.group(1) if heading.group(2) == "Raises" else None
            entry_indent = None
            continue
        if section_indent is None or not line.strip():
            continue
        indent = line[: len(line) - len(line.lstrip())]
        if len(indent) <= len(section_indent):
            section_indent = None
            continue
        entry_indent = entry_indent or indent
        if indent == entry_indent and not ENTRY.match(line.strip()):
            lines[i] = f"{indent}Exception: {line.strip()}"
    return "\n".join(lines)


class SphinxRoles(griffe.Extension):
    """Rewrites each docstring's Sphinx roles as links when Griffe loads an object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = obj.docstring.value
        if obj.path in UNTYPED_RAISES:
            text = sentences_as_exceptions(text)
        if ":`" in text:
            text = ROLE.sub(as_autoref, text)
        obj.docstring.value = text
