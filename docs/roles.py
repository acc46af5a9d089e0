"""A Griffe extension for the docs build: how the API reference reads the package's docstrings.

- The docstrings cross-reference with Sphinx roles (``:class:`~plan_parallel.state.State```), which ``help()``
  shows as written. In the reference each becomes a link to the name's entry when the reference documents it,
  and inline code otherwise (an optional cross-reference: no warning when the name has no entry).
- A ``Raises:`` entry written as a sentence ("Whatever the env raises; ...", "The env's own exception ...")
  instead of ``Type: description`` is listed as ``Exception: <the sentence>``, so the reference keeps it
  (Griffe would drop it with a warning).
"""
from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ["SphinxRoles"]

ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):`(~?)([\w.]+)(?:\(\))?`")
SECTION = re.compile(r"^(\s*)(\w[\w ]*):\s*$")
ENTRY = re.compile(r"^[\w.]+(?:\s*(?:,|/|or)\s*[\w.]+)*:(?:\s|$)")


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
    """Rewrites each docstring (roles, untyped Raises entries) when Griffe loads an object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = obj.docstring.value
        if "Raises:" in text:
            text = sentences_as_exceptions(text)
        if ":`" in text:
            text = ROLE.sub(as_autoref, text)
        obj.docstring.value = text
