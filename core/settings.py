"""Typed settings from YAML and the command line, shared by the pipeline's and the trainer's
configuration dataclasses: values are checked against each field's type hint, and the string
literal under a field is its help text (so a setting is declared, typed and documented once)."""

from __future__ import annotations

import argparse
import ast
import inspect
import textwrap
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import yaml


class ConfigError(ValueError):
    """A setting is unknown, mistyped or outside its allowed values."""


class Settings:
    """Base of every settings section: `validate` checks the section's own values, so a bad
    setting is reported before any work starts, by the section that knows the rule.

    `content_fields` declares which fields change what a run stores (the pipeline's
    fingerprint: work done under another fingerprint is redone): None, every field; a tuple,
    those fields only (enter the fingerprint by their own names); (), none."""

    content_fields: ClassVar[tuple[str, ...] | None] = None

    def validate(self) -> None:
        """Raise ConfigError naming the setting; the default has nothing to check."""

    def optional_content(self) -> dict:
        """Settings that change what a run stores only once given (a model path that switches
        a stage on): they enter the fingerprint then, as `section.field`, so that work done
        without them keeps its fingerprint. The default has none."""
        return {}


def read_settings_file(path: str | Path, expected: str = "a mapping of settings") -> dict:
    """A YAML file of settings, as a mapping: the one reader of the pipeline's and the trainer's
    --config files. A missing file, bad YAML or another shape is a ConfigError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: configuration file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected {expected}, got {type(data).__name__}")
    return data


def check_choice(section: str, name: str, value: object, allowed: Iterable[object]) -> None:
    """A setting that names one of a fixed set: a one-line error listing the set otherwise."""
    allowed = list(allowed)
    if value not in allowed:
        raise ConfigError(f"{section}.{name}={value!r}: choose one of {allowed}")


def parse_assignment(item: str, form: str = "name=value") -> tuple[str, object]:
    """`name=value` from the command line; the value is read as YAML (numbers, true, [lists])."""
    name, sep, raw = item.partition("=")
    if not sep:
        raise ConfigError(f"--set {item!r}: expected {form}")
    try:
        return name.strip(), yaml.safe_load(raw)
    except yaml.YAMLError:
        raise ConfigError(f"--set {item!r}: the value is not valid YAML") from None


def set_setting(obj, name: str, value, source: str, label: str | None = None) -> None:
    """Set one typed field of a settings dataclass: the one setter of the pipeline and trainer.

    `label` is how messages spell the field (`caption.engine` for a pipeline section).
    """
    import dataclasses

    label = label or name
    hints = typing.get_type_hints(type(obj))
    if name not in {f.name for f in dataclasses.fields(obj)}:  # a ClassVar is no setting
        known = ", ".join(f.name for f in dataclasses.fields(obj))
        raise ConfigError(f"{source}: unknown setting '{label}' (known: {known})")
    try:
        setattr(obj, name, coerce(value, hints[name]))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {label}={value!r}: {exc}") from None


def coerce(value, hint):
    """Check a YAML value against a field's type hint and convert it where that is lossless."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arg)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise ValueError("; ".join(errors))
    if origin in (list, tuple):
        if isinstance(value, str) and args and args[0] is str:
            value = [value]  # `--set shards=path` names one path
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        items = [coerce(v, args[0]) for v in value] if args else list(value)
        return items if origin is list else tuple(items)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected a mapping, got {type(value).__name__}")
        return dict(value)
    if hint is typing.Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise TypeError(f"expected true or false, got {value!r}")
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):
        return float(value)  # YAML reads 1e-4 (no dot) as a string
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"expected {getattr(hint, '__name__', hint)}, got {type(value).__name__}")


def field_docs(cls) -> dict[str, str]:
    """Help text of each field: the string literal under it, inherited ones included."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    class_node = tree.body[0]
    if not isinstance(class_node, ast.ClassDef):
        return {}
    docs, body = {}, class_node.body
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """`--config FILE` and repeatable `--set section.field=value`, as the commands that read the
    pipeline's settings (dataset, caption) take them; `load_config` reads both."""
    parser.add_argument(
        "--config", type=Path, help="YAML file of settings, {section: {field: value}}"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one setting (repeatable)",
    )
