"""From the recipe's tool specs (:class:`rlvr.tools.spec.ToolsConfig`) to a :class:`ToolEnvironment`."""

from __future__ import annotations

from typing import Any

from rlvr.tools.environment import ToolEnvironment
from rlvr.tools.formats import choose_format
from rlvr.tools.function_tool import FunctionTool, import_function
from rlvr.tools.python_tool import PythonTool
from rlvr.tools.spec import ToolsConfig, ToolSpec


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
