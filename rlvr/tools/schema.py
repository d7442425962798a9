"""A tool's JSON schema from a typed Python function: parameters from the signature's annotations, descriptions from
the docstring (Google style: a summary, then ``Args:`` with ``name: description`` lines). The result is the
OpenAI-style ``{"type": "function", "function": {...}}`` that chat templates take as ``tools=``."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


class ToolSchemaError(TypeError):
    """A function cannot be a tool: a parameter without a type annotation, or a type with no JSON form."""


def json_type(annotation: Any, where: str) -> dict[str, Any]:
    """The JSON schema of one annotation (str, int, float, bool, None, list[X], dict[str, X], Literal, X | Y,
    Optional[X]).

    Raises:
        ToolSchemaError: a type with no JSON form, named with ``where``.
    """
    if annotation in _SIMPLE:
        return {"type": _SIMPLE[annotation]}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (list, tuple) or origin in (list, tuple):
        return {"type": "array", **({"items": json_type(args[0], where)} if args else {})}
    if annotation is dict or origin is dict:
        return {"type": "object", **({"additionalProperties": json_type(args[1], where)} if len(args) == 2 else {})}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [json_type(a, where) for a in args if a is not type(None)]
        schema = options[0] if len(options) == 1 else {"anyOf": options}
        return {**schema, "nullable": True} if type(None) in args else schema
    if annotation is Any:
        return {}
    raise ToolSchemaError(f"{where}: type {annotation!r} has no JSON form (use str, int, float, bool, list, dict, "
                          "Literal or unions of them)")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` from a Google-style docstring."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    parts = re.split(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?):\s*$", doc, flags=re.M)
    description = parts[0].strip()
    params: dict[str, str] = {}
    for header, body in zip(parts[1::2], parts[2::2]):
        if header not in ("Args", "Arguments", "Parameters"):
            continue
        name = None
        for line in body.splitlines():
            match = re.match(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if match:
                name = match.group(1).lstrip("*")
                params[name] = match.group(2).strip()
            elif name and line.strip():
                params[name] = (params[name] + " " + line.strip()).strip()
    return description, params


def function_schema(fn: Callable[..., Any], name: str | None = None, bound: frozenset[str] = frozenset()) -> dict:
    """The tool schema of ``fn``; parameters in ``bound`` (fixed by the recipe's ``kwargs``) are left out.

    Raises:
        ToolSchemaError: a parameter (not bound) without an annotation, ``*args``/``**kwargs``, or a type with no JSON
            form.
    """
    label = name or fn.__name__
    description, docs = parse_docstring(inspect.getdoc(fn))
    hints = typing.get_type_hints(fn)
    properties: dict[str, Any] = {}
    required = []
    for param in inspect.signature(fn).parameters.values():
        if param.name in bound:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolSchemaError(f"tool {label}: *args/**kwargs cannot be described to the model")
        if param.name not in hints:
            raise ToolSchemaError(f"tool {label}: parameter {param.name!r} has no type annotation")
        prop = json_type(hints[param.name], f"tool {label}, parameter {param.name!r}")
        if param.name in docs:
            prop["description"] = docs[param.name]
        properties[param.name] = prop
        if param.default is param.empty:
            required.append(param.name)
    return {"type": "function", "function": {
        "name": label, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}
