"""The docs build's reading of the package's Sphinx roles: a Griffe extension (``mkdocs.yml``).

The docstrings cross-reference with Sphinx roles (``:class:`~plan_parallel.state.State```), written for
``help()``, which shows them as they are. In the API reference each role becomes a link to the name's entry
when the reference documents it, and inline code otherwise (an optional cross-reference: no warning when the
name has no entry). ``~`` shows the last part of the dotted name only, as Sphinx does.
"""
from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ["SphinxRoles"]

ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):`(~?)([\w.]+)(?:\(\))?`")


def as_autoref(match: re.Match[str]) -> str:
    short, path = match.group(1), match.group(2)
    title = path.rsplit(".", 1)[-1] if short else path
    return f'<autoref identifier="{path}" optional><code>{title}</code></autoref>'


class SphinxRoles(griffe.Extension):
    """Rewrites each docstring's Sphinx roles as links when Griffe loads an object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = obj.docstring.value
        if ":`" in text:
            text = ROLE.sub(as_autoref, text)
        obj.docstring.value = text
