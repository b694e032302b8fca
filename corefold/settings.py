"""Settings: one frozen dataclass per pass, named presets, ``--set name=value`` overrides.

A settings class is a frozen dataclass that documents every field in an ``Attributes:``
section of its docstring and lists its presets in ``PRESETS`` (a mapping from preset name
to the field values that differ from the defaults). ``fast``, ``default`` and ``strong``
are the usual names (as KaHIP's); ``seed`` is the method's literal behaviour as its seed
text describes it, where that differs from the default.

The command line and Python share the same defaults because both start from
:func:`preset`; the CLI then applies :func:`override` for each ``--set`` and prints
:func:`describe` for ``--help-settings``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from typing import Any, Mapping, Sequence, TypeVar

from corefold.errors import CorefoldError

S = TypeVar("S")


class SettingsError(CorefoldError):
    """A preset name or a ``--set`` assignment that the settings class does not accept."""


def preset(cls: type[S], name: str = "default") -> S:
    """The preset ``name`` of settings class ``cls`` (``default``: the field defaults).

    Raises:
        SettingsError: ``cls`` has no such preset.
    """
    presets: Mapping[str, Mapping[str, Any]] = getattr(cls, "PRESETS", {})
    if name == "default":
        return cls(**dict(presets.get("default", {})))
    if name not in presets:
        known = ", ".join(["default"] + [p for p in presets if p != "default"])
        raise SettingsError(f"unknown preset '{name}' for {cls.__name__} (known: {known})")
    return cls(**dict(presets[name]))


def preset_names(cls: type) -> list[str]:
    return ["default"] + [p for p in getattr(cls, "PRESETS", {}) if p != "default"]


def field_docs(cls: type) -> dict[str, str]:
    """Each field's meaning, read from the ``Attributes:`` section of ``cls``'s docstring.

    A line ``a, b: text`` documents both ``a`` and ``b``.
    """
    doc = cls.__doc__ or ""
    out: dict[str, str] = {}
    if "Attributes:" not in doc:
        return out
    body = doc.split("Attributes:", 1)[1]
    current: list[str] = []
    text: list[str] = []
    indent = None
    for line in body.splitlines():
        if not line.strip():
            continue
        lead = len(line) - len(line.lstrip())
        if indent is None:
            indent = lead
        if lead < indent:
            break
        m = re.match(r"^\s*([A-Za-z_][\w, ]*):\s*(.*)$", line) if lead == indent else None
        if m:
            for name in current:
                out[name] = " ".join(text)
            current = [n.strip() for n in m.group(1).split(",") if n.strip()]
            text = [m.group(2).strip()]
        else:
            text.append(line.strip())
    for name in current:
        out[name] = " ".join(text)
    return out


def _convert(text: str, annotation: Any, where: str) -> Any:
    """``text`` as a value of ``annotation`` (bool, int, float, str, their Optionals and
    Literals, and tuples of them)."""
    if isinstance(annotation, str):
        annotation = eval(annotation, {"typing": typing}, {})  # noqa: S307 - our own annotations
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null") and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(text, a, where)
            except SettingsError as exc:
                errors.append(str(exc))
        raise SettingsError(errors[0] if errors else f"{where}: cannot parse {text!r}")
    if origin is typing.Literal:
        for a in args:
            if str(a) == text:
                return a
        raise SettingsError(f"{where}: {text!r} is not one of {', '.join(map(str, args))}")
    if origin in (tuple, list):
        parts = [p for p in text.split(",") if p.strip() != ""]
        inner = args[0] if args else str
        return tuple(_convert(p.strip(), inner, where) for p in parts)
    if annotation is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{where}: {text!r} is not a boolean (true or false)")
    if annotation is int:
        try:
            return int(text)
        except ValueError:
            raise SettingsError(f"{where}: {text!r} is not an integer") from None
    if annotation is float:
        try:
            value = float(text)
        except ValueError:
            raise SettingsError(f"{where}: {text!r} is not a number") from None
        if not math.isfinite(value):
            raise SettingsError(f"{where}: {text!r} is not a finite number")
        return value
    if annotation is str:
        return text
    raise SettingsError(f"{where}: cannot be set from the command line")


def override(settings: S, assignments: Sequence[str]) -> S:
    """``settings`` with each ``name=value`` of ``assignments`` applied (typed by the field).

    Raises:
        SettingsError: a malformed assignment, an unknown field (the message lists the
            known ones), or a value of the wrong type.
    """
    fields = {f.name: f for f in dataclasses.fields(settings)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(type(settings))
    changes: dict[str, Any] = {}
    for item in assignments:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise SettingsError(f"--set {item!r}: expected NAME=VALUE")
        if name not in fields:
            raise SettingsError(f"--set {name}: no such setting of {type(settings).__name__} "
                                f"(known: {', '.join(fields)}; see --help-settings)")
        changes[name] = _convert(text.strip(), hints.get(name, str), f"--set {name}")
    return dataclasses.replace(settings, **changes) if changes else settings  # type: ignore[type-var]


def describe(cls: type, current: Any | None = None) -> str:
    """A table of every field: name, type, default (and current value), meaning, then the presets."""
    docs = field_docs(cls)
    default = cls()
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        kind = getattr(hints.get(f.name), "__name__", None) or str(hints.get(f.name)).replace("typing.", "")
        value = getattr(default, f.name)
        now = "" if current is None or getattr(current, f.name) == value else f"  (now {getattr(current, f.name)!r})"
        rows.append(f"  {f.name} ({kind}) = {value!r}{now}\n      {docs.get(f.name, '(undocumented)')}")
    presets = getattr(cls, "PRESETS", {})
    lines = [f"{cls.__name__}: set any with --set NAME=VALUE", *rows, "presets (--preset):"]
    lines.append("  default: the values above")
    for name, values in presets.items():
        if name != "default":
            lines.append(f"  {name}: " + (", ".join(f"{k}={v!r}" for k, v in values.items()) or "as default"))
    return "\n".join(lines)


def undocumented_fields(cls: type) -> list[str]:
    """Fields that the ``Attributes:`` section does not describe (a test keeps this empty)."""
    docs = field_docs(cls)
    return [f.name for f in dataclasses.fields(cls) if f.name not in docs]
