"""CEL evaluation for the mock STS with ``cel-python`` (``celpy``), the same expressions Google's
STS evaluates: attribute mappings over ``assertion`` and attribute conditions over
``assertion``, ``google`` and ``attribute``. Any evaluation error (a missing claim, a type
mismatch) is reported as :class:`CelError`; the STS treats it as a denial, as Google does."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

__all__ = ["CelError", "check_expression", "evaluate_bool", "evaluate_string", "explain_false"]

# celpy logs every evaluation step at DEBUG; keep it out of the mock's logs.
logging.getLogger("celpy").setLevel(logging.WARNING)
logging.getLogger("Evaluator").setLevel(logging.WARNING)
logging.getLogger("NameContainer").setLevel(logging.WARNING)


class CelError(Exception):
    """A CEL expression failed to compile or to evaluate."""


@functools.lru_cache(maxsize=256)
def _program(expression: str) -> Any:
    env = celpy.Environment()
    try:
        return env.program(env.compile(expression))
    except CELParseError as exc:
        raise CelError(f"does not compile: {str(exc).splitlines()[0]}") from exc


def check_expression(expression: str) -> None:
    """Raise :class:`CelError` if ``expression`` does not compile."""
    _program(expression)


def _evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    program = _program(expression)
    bound = {name: json_to_cel(value) for name, value in activation.items()}
    try:
        result = program.evaluate(bound)
    except CELEvalError as exc:
        raise CelError(_describe(exc)) from exc
    except (TypeError, KeyError, ValueError) as exc:
        raise CelError(f"{type(exc).__name__}: {exc}") from exc
    if isinstance(result, CELEvalError):
        raise CelError(_describe(result))
    return result


def _describe(exc: Exception) -> str:
    first = exc.args[0] if exc.args else exc
    return str(first)


def evaluate_string(expression: str, activation: Mapping[str, object]) -> str:
    """Evaluate an attribute mapping; the result must be a string."""
    result = _evaluate(expression, activation)
    if not isinstance(result, celtypes.StringType | str):
        raise CelError(f"evaluated to a {type(result).__name__}, not a string")
    return str(result)


def evaluate_bool(expression: str, activation: Mapping[str, object]) -> bool:
    """Evaluate an attribute condition; the result must be a boolean."""
    result = _evaluate(expression, activation)
    if not isinstance(result, celtypes.BoolType | bool):
        raise CelError(f"evaluated to a {type(result).__name__}, not a boolean")
    return bool(result)


def _top_level_conjuncts(expression: str) -> list[str]:
    """Split ``a && b && c`` at top-level ``&&`` (outside parentheses, brackets and quotes)."""
    parts: list[str] = []
    depth, quote, start, i = 0, "", 0, 0
    while i < len(expression):
        char = expression[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif expression.startswith("&&", i) and depth == 0:
            parts.append(expression[start:i].strip())
            start = i + 2
            i += 1
        i += 1
    parts.append(expression[start:].strip())
    return parts


def explain_false(expression: str, activation: Mapping[str, Any]) -> str:
    """Which top-level clause of a false (or failing) condition is to blame — a diagnosis the
    mock adds to Google's terse "rejected by the attribute condition"."""
    for clause in _top_level_conjuncts(expression):
        try:
            if not evaluate_bool(clause, activation):
                return f"clause is false: {clause}"
        except CelError as exc:
            return f"clause failed ({exc}): {clause}"
    return "the condition as a whole is false"
