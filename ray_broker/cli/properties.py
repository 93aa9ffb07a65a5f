"""`send --property`: application properties with typed values, as `KEY=VALUE` (text) or
`KEY:TYPE=VALUE` with TYPE one of int, float, bool and str, so that a filter such as
`amount > 100` compares numbers."""
from __future__ import annotations

from typing import Any, Callable

import typer

PROPERTY_HELP = ("An application property, repeatable: KEY=VALUE is text; KEY:int=VALUE, KEY:float=VALUE and "
                 "KEY:bool=true|false give it that type (KEY:str=VALUE is text too), e.g. --property amount:int=250.")


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


PROPERTY_TYPES: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "bool": _bool, "str": str}
"""The types a property value may be given, and how its text becomes one."""
_WANTED = {"int": "an int", "float": "a float", "bool": "true or false"}


def parse_property(text: str) -> tuple[str, Any]:
    """`(key, value)` from `KEY=VALUE` or `KEY:TYPE=VALUE`; `typer.BadParameter` (a usage error
    naming --property) when it is neither, the type is unknown or the value is not of that type."""
    name, found, value = text.partition("=")
    if not found or not name:
        raise _bad(f"{text!r} is not KEY=VALUE (or KEY:TYPE=VALUE)")
    key, typed, type_name = name.rpartition(":")
    if not typed:
        return name, value
    convert = PROPERTY_TYPES.get(type_name)
    if convert is None or not key:
        raise _bad(f"{text!r} has no known type: write KEY:TYPE=VALUE with TYPE one of {', '.join(PROPERTY_TYPES)} "
                   "(a KEY with ':' in it as KEY:str=VALUE)")
    try:
        return key, convert(value)
    except ValueError:
        raise _bad(f"{text!r}: {value!r} is not {_WANTED[type_name]}") from None


def parse_properties(texts: list[str]) -> dict[str, Any]:
    """Every `--property` given, as application properties (a key given twice keeps its last value)."""
    return dict(parse_property(text) for text in texts)


def _bad(message: str) -> typer.BadParameter:
    return typer.BadParameter(message, param_hint="'--property'")
