"""Tools for rollouts: tools (the sandboxed ``python`` tool, typed Python functions), how calls are written and
answered (fenced ```python blocks, or the chat template's ``<tool_call>``), and environments (``reset``/``step``)
of which a tool list is the simplest (a recipe names another by import path, ``rollout.environment``:
:func:`rlvr.tools.loading.build_environment`; examples in :mod:`rlvr.tools.envs`). They know no rollout engine: the
turn loop that runs them is :mod:`rlvr.rollout.multi_turn`, and a recipe's prompts go through it by
:mod:`rlvr.rollout.tool_sampler`.

``rlvr.tools.spec`` (the recipe's keys) imports no torch and no tool code."""

from rlvr.tools.calls import Tool, ToolCall, ToolResult
from rlvr.tools.environment import CallRecord, Environment, Episode, EpisodeReward, Reply, ToolEnvironment
from rlvr.tools.formats import CallFormat, choose_format
from rlvr.tools.function_tool import FunctionTool
from rlvr.tools.python_tool import PythonTool
from rlvr.tools.schema import ToolSchemaError, function_schema
from rlvr.tools.spec import ToolsConfig, ToolSpec

__all__ = ["CallFormat", "CallRecord", "Environment", "Episode", "EpisodeReward", "FunctionTool", "PythonTool", "Reply",
           "Tool",
           "ToolCall", "ToolEnvironment", "ToolResult", "ToolSchemaError", "ToolSpec", "ToolsConfig", "choose_format",
           "function_schema"]
