"""The operator table: one :class:`~corefold.ops.schema.OpDef` per (domain, operator).

Entries are defined in ``corefold/ops/defs/*.py`` (one module per operator family; a new
operator is a new module there, discovered on import) with :func:`define` or the
:func:`op` decorator. :func:`get` is the only way any stage reads an entry, and it raises
:class:`~corefold.errors.UnsupportedOpError` for an operator the table lacks: there are
no silent defaults anywhere.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from dataclasses import replace
from typing import Any, Callable

from corefold.errors import UnsupportedOpError
from corefold.ops.schema import Kernel, OpDef

TABLE: dict[tuple[str, str], OpDef] = {}
_LOADED = False
_LOCK = threading.Lock()

#: the default ONNX domain's aliases
_DEFAULT_DOMAINS = ("", "ai.onnx")


def _norm_domain(domain: str) -> str:
    return "" if domain in _DEFAULT_DOMAINS else domain


def define(entry: OpDef) -> OpDef:
    """Add ``entry`` to the table.

    Raises:
        ValueError: the operator is defined twice.
    """
    entry = replace(entry, domain=_norm_domain(entry.domain))
    if entry.key in TABLE:
        raise ValueError(f"operator {entry.domain + '::' if entry.domain else ''}{entry.op_type} is defined twice")
    TABLE[entry.key] = entry
    return entry


def op(*op_types: str, **facets: Any) -> Callable[[Kernel], Kernel]:
    """Decorator: define each of ``op_types`` with the decorated function as its kernel and
    the given facets."""

    def register(fn: Kernel) -> Kernel:
        for name in op_types:
            define(OpDef(name, kernel=fn, **facets))
        return fn

    return register


#: entries derived from others (``corefold.int`` from the float operators), made once every
#: definition module has loaded
_DERIVED: list[Callable[[dict[tuple[str, str], OpDef]], None]] = []


def derive(fn: Callable[[dict[tuple[str, str], OpDef]], None]) -> Callable:
    """Decorator: run ``fn(table)`` after every definition module has loaded, to define
    entries that copy facets of others."""
    _DERIVED.append(fn)
    return fn


def load_all() -> dict[tuple[str, str], OpDef]:
    """Import every definition module once (they define on import), make the derived
    entries, and return the table."""
    global _LOADED
    if not _LOADED:
        with _LOCK:
            if not _LOADED:
                from corefold.ops import defs as pkg

                for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
                    if not mod.name.endswith("_test"):
                        importlib.import_module(f"{pkg.__name__}.{mod.name}")
                for fn in _DERIVED:
                    fn(TABLE)
                _LOADED = True
    return TABLE


#: domain -> the maker of an entry for any name in it: domains whose operators cannot be
#: listed (``corefold.aten``: whatever a traced PyTorch model calls); see :func:`open_domain`
OPEN_DOMAINS: dict[str, Callable[[str], OpDef]] = {}


def open_domain(domain: str) -> Callable:
    """Decorator: ``fn(op_type) -> OpDef`` makes the entry of any operator of ``domain``
    the first time it is looked up (the domain's operators cannot be listed in advance)."""

    def register(fn: Callable[[str], OpDef]) -> Callable[[str], OpDef]:
        OPEN_DOMAINS[domain] = fn
        return fn

    return register


def lookup(op_type: str, domain: str = "") -> OpDef | None:
    """The entry of an operator, or None (made on first use in an open domain)."""
    table = load_all()
    key = (_norm_domain(domain), op_type)
    entry = table.get(key)
    if entry is None and key[0] in OPEN_DOMAINS:
        with _LOCK:
            entry = table.get(key) or define(OPEN_DOMAINS[key[0]](op_type))
    return entry


def get(op_type: str, domain: str = "", where: str = "") -> OpDef:
    """The entry of an operator.

    Args:
        where: what to name in the error (a node), e.g. ``"node 'conv1'"``.

    Raises:
        UnsupportedOpError: the table has no entry for the operator.
    """
    entry = lookup(op_type, domain)
    if entry is None:
        dom = _norm_domain(domain)
        what = f"{dom}::{op_type}" if dom else op_type
        raise UnsupportedOpError(f"{where + ': ' if where else ''}operator {what} is not supported")
    return entry


def entries() -> list[OpDef]:
    """Every entry, sorted by domain and name."""
    return [e for _, e in sorted(load_all().items())]
