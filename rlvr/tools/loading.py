"""From the recipe's tool and environment keys (:class:`rlvr.tools.spec.ToolsConfig`) to the rollout's
:class:`~rlvr.tools.environment.Environment`: the one place training, ``rlvr eval`` and ``rlvr filter`` build it.

- tools alone: a :class:`~rlvr.tools.environment.ToolEnvironment` of them;
- ``rollout.environment: package.module:ClassName`` alone: ``ClassName(**environment_kwargs)`` (plus ``tokenizer=``
  when its constructor has a ``tokenizer`` parameter);
- both: the class must subclass :class:`~rlvr.tools.environment.ToolEnvironment` (an environment that owns the
  tools): ``ClassName(tools, call_format, tokenizer, max_tool_output_tokens=..., **environment_kwargs)``. Any other
  environment with tools is refused: nothing would run their calls.
"""

from __future__ import annotations

import inspect
from typing import Any

from rlvr.did_you_mean import closest
from rlvr.import_paths import resolve_import_path
from rlvr.tools.environment import Environment, ToolEnvironment
from rlvr.tools.formats import choose_format
from rlvr.tools.function_tool import FunctionTool, import_function
from rlvr.tools.python_tool import PythonTool
from rlvr.tools.spec import ToolsConfig, ToolSpec


class EnvironmentLoadError(ValueError):
    """``rollout.environment`` cannot be built: not an :class:`Environment` subclass, kwargs that its constructor does
    not take, tools it cannot run, or a constructor that raised. The message names the path."""


def build_tool(spec: ToolSpec) -> Any:
    """One tool from its spec: ``python`` or an imported ``package.module:function``.

    Raises:
        ValueError: the function cannot be imported or its kwargs are not its parameters.
        rlvr.tools.schema.ToolSchemaError: a parameter without a JSON-typeable annotation.
    """
    if spec.name == "python":
        return PythonTool(**spec.kwargs)
    return FunctionTool(import_function(spec.name), kwargs=spec.kwargs)


def build_tool_environment(config: ToolsConfig, tokenizer: Any) -> ToolEnvironment:
    """The environment for ``config``'s tools, in the call format its ``call_format`` picks for this tokenizer."""
    fmt = choose_format(config.call_format, getattr(tokenizer, "chat_template", None))
    return ToolEnvironment([build_tool(s) for s in config.tools], fmt, tokenizer, config.max_tool_output_tokens)


TOOL_ENVIRONMENT_ARGS = ("tools", "call_format", "tokenizer", "max_tool_output_tokens")
"""What a :class:`ToolEnvironment` subclass named in a recipe is built with before its own kwargs."""


def environment_class(config: ToolsConfig) -> type[Environment]:
    """The class ``config.environment`` names, checked: an :class:`Environment` subclass (a
    :class:`ToolEnvironment` one when ``config.tools`` is set) whose constructor takes ``environment_kwargs``.

    Raises:
        rlvr.import_paths.ImportPathError: the path does not resolve to a class (named, with the closest class name
            of the module where the name is mistyped).
        EnvironmentLoadError: not an Environment subclass; tools without a ToolEnvironment subclass; a kwarg the
            constructor does not take (with the closest parameter) or a required one missing.
    """
    path = config.environment
    if path is None:
        raise ValueError("environment_class needs rollout.environment")
    cls = resolve_import_path(path, "environment", expected="class")
    if not issubclass(cls, Environment):
        raise EnvironmentLoadError(f"rollout.environment {path!r} is not a subclass of rlvr.tools.Environment")
    owns_tools = issubclass(cls, ToolEnvironment)
    if config.tools and not owns_tools:
        raise EnvironmentLoadError(
            f"rollout.environment {path!r} is not a rlvr.tools.ToolEnvironment subclass, so it cannot run "
            f"rollout.tools ({', '.join(t.name for t in config.tools)}): drop rollout.tools, or subclass "
            "ToolEnvironment (it is then built with the tools and answers their calls)")
    given = TOOL_ENVIRONMENT_ARGS if owns_tools else ("tokenizer",)
    _check_kwargs(path, cls, config.environment_kwargs, given)
    return cls


def build_environment(config: ToolsConfig, tokenizer: Any) -> Environment | None:
    """The rollout's environment for ``config`` (see the module docstring), or None for single-turn generation (no
    tools, no environment).

    Raises:
        rlvr.import_paths.ImportPathError, EnvironmentLoadError: see :func:`environment_class`; also a constructor
            that raised.
        ValueError: a tool function that cannot be imported, or ``kwargs`` that are not its parameters.
        rlvr.tools.schema.ToolSchemaError: a tool parameter without a JSON-typeable annotation.
    """
    if config.environment is None:
        return build_tool_environment(config, tokenizer) if config.tools else None
    cls = environment_class(config)
    kwargs = dict(config.environment_kwargs)
    args: tuple[Any, ...] = ()
    if issubclass(cls, ToolEnvironment):
        fmt = choose_format(config.call_format, getattr(tokenizer, "chat_template", None))
        args = ([build_tool(s) for s in config.tools], fmt, tokenizer)
        kwargs["max_tool_output_tokens"] = config.max_tool_output_tokens
    elif "tokenizer" in inspect.signature(cls).parameters:
        kwargs["tokenizer"] = tokenizer
    try:
        return cls(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the user's constructor: one line naming it, before any model loads
        raise EnvironmentLoadError(f"rollout.environment {config.environment!r}: building it with "
                                   f"{config.environment_kwargs or '{}'} raised {type(e).__name__}: {e}") from e


def _check_kwargs(path: str, cls: type, kwargs: dict[str, Any], given: tuple[str, ...]) -> None:
    """``kwargs`` against ``cls``'s constructor, less the parameters rlvr fills (``given``)."""
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):  # a constructor without a signature: not checked
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in given]
    valid = [p.name for p in named]
    for key in kwargs:
        if key in given:
            raise EnvironmentLoadError(f"rollout.environment {path!r}: environment_kwargs cannot set {key!r} (rlvr "
                                       "passes it)")
        if key not in valid:
            close = closest(key, valid)
            hint = f" Did you mean {close!r}?" if close else ""
            raise EnvironmentLoadError(
                f"rollout.environment {path!r}: environment_kwargs has {key!r}, which its constructor does not "
                f"take.{hint} Its keyword arguments: {', '.join(valid) or '(none)'}")
    missing = [p.name for p in named if p.default is p.empty and p.name not in kwargs]
    if missing:
        raise EnvironmentLoadError(f"rollout.environment {path!r}: environment_kwargs lacks the required argument(s) "
                                   f"{', '.join(missing)}")
