"""The command line's parser: argparse's, whose errors name the nearest choice or option (Python 3.11's do not)."""
from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["Parser"]

_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` (its subcommands' too) whose error messages end with a suggestion:
    ``invalid choice: 'proces' (...); did you mean 'process'?``, ``unrecognized arguments: --planer mcts;
    did you mean --planner?``. The suggestion is the closest known spelling (``difflib``), when one is close.

    An argument the subcommand does not know is refused by the subcommand (its usage line, its options
    suggested), and an option of another subcommand is named as such:
    ``unrecognized arguments: --no-progress; --no-progress is an option of 'plan', not of 'check'``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.option_names: list[str] = []  # (before argparse's __init__, which adds -h)
        self.subcommands: dict[str, Parser] = {}
        self.subcommand_dest: str | None = None
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.option_names.extend(action.option_strings)
        return action

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        self.subcommands = action.choices  # name -> parser, filled as subcommands are added
        self.subcommand_dest = kwargs.get("dest")
        return action

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = getattr(ns, self.subcommand_dest, None) if self.subcommand_dest else None
            refuser = self.subcommands.get(chosen, self) if isinstance(chosen, str) else self
            refuser.refuse(extras, chosen, self.subcommands)
        return ns

    def refuse(self, extras: list[str], chosen: str | None, siblings: dict[str, Parser]) -> NoReturn:
        """Exit with ``unrecognized arguments: ...``, naming the subcommand an option belongs to, else the
        nearest of this parser's own options."""
        message = f"unrecognized arguments: {' '.join(extras)}"
        for word in extras:
            option = word.split("=", 1)[0]
            owners = [name for name, p in siblings.items() if name != chosen and option in p.option_names]
            if word.startswith("-") and owners and chosen is not None:
                super().error(f"{message}; {option} is an option of '{owners[0]}', not of '{chosen}'")
        self.error(message)

    def error(self, message: str) -> NoReturn:
        super().error(message + self._suggestion(message))

    def _suggestion(self, message: str) -> str:
        choice = _INVALID_CHOICE.search(message)
        if choice is not None:
            known = re.findall(r"'([^']*)'", choice.group(2))
            close = difflib.get_close_matches(choice.group(1), known, n=1)
            return f"; did you mean '{close[0]}'?" if close else ""
        if message.startswith("unrecognized arguments:"):
            options = self.option_names + [o for sub in self.subcommands.values() for o in sub.option_names]
            for word in message.split(":", 1)[1].split():
                close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1) if word.startswith("-") else []
                if close:
                    return f"; did you mean {close[0]}?"
        return ""
