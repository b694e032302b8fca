"""``--set NAME=VALUE`` and ``--help-settings`` for a subcommand whose pass has a settings
class (:mod:`corefold.settings`)."""

from __future__ import annotations

import argparse
import importlib


def load_settings_class(path: str) -> type:
    """``"package.module:Class"`` -> the class (imported only when needed: ``corefold
    --help`` stays fast)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class _HelpSettings(argparse.Action):
    """Print the settings table and exit 0, like ``--help`` (no other argument needed)."""

    def __init__(self, option_strings, dest, settings_class: str = "", **kwargs):
        self.settings_class = settings_class
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from corefold.settings import describe

        print(describe(load_settings_class(self.settings_class)))
        parser.exit(0)


def add_settings_arguments(p: argparse.ArgumentParser, settings_class: str, dest: str = "set") -> None:
    """Add ``--set NAME=VALUE`` (repeatable, into ``args.<dest>``) and ``--help-settings``
    for the settings class at ``settings_class`` (``"package.module:Class"``)."""
    name = settings_class.rpartition(":")[2]
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest=dest,
                   help=f"set any field of {name} (repeatable; see --help-settings)")
    p.add_argument("--help-settings", action=_HelpSettings, settings_class=settings_class,
                   help=f"list every field of {name} with its default and meaning, then exit")
