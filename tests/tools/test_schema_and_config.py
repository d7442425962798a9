"""Tool schemas from typed functions, the recipe's tool keys (no torch), the call-format choice."""

import subprocess
import sys
from typing import Literal

import pytest
from pydantic import ValidationError

from rlvr.tools import ToolSchemaError, ToolsConfig, choose_format, function_schema


def lookup(key: str, limit: int = 3, mode: Literal["exact", "prefix"] = "exact", tags: list[str] | None = None,
           table: str = "") -> list[str]:
    """Look rows up in a table.

    Args:
        key: the value to look for.
        limit: most rows
            to return.
        mode: how keys match.
    """
    return []


def test_schema_from_signature_and_docstring():
    schema = function_schema(lookup, bound=frozenset({"table"}))
    fn = schema["function"]
    assert schema["type"] == "function" and fn["name"] == "lookup" and fn["description"] == "Look rows up in a table."
    props = fn["parameters"]["properties"]
    assert props["key"] == {"type": "string", "description": "the value to look for."}
    assert props["limit"] == {"type": "integer", "description": "most rows to return."}
    assert props["mode"] == {"enum": ["exact", "prefix"], "description": "how keys match."}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "nullable": True}
    assert "table" not in props and fn["parameters"]["required"] == ["key"]


def test_untyped_parameters_are_refused_by_name():
    def f(x, y: int):
        return x

    with pytest.raises(ToolSchemaError, match="parameter 'x' has no type annotation"):
        function_schema(f)

    def g(x: object):
        return x

    with pytest.raises(ToolSchemaError, match="no JSON form"):
        function_schema(g)


def test_tools_config_validates_and_imports_no_torch():
    cfg = ToolsConfig(tools=[{"name": "python"}, {"name": "my_tools:lookup", "kwargs": {"table": "x.csv"}}],
                      max_turns=4, max_tool_output_tokens=256)
    assert cfg.call_format == "auto" and cfg.tools[1].kwargs == {"table": "x.csv"}
    with pytest.raises(ValidationError, match="neither a built-in tool"):
        ToolsConfig(tools=[{"name": "pyhton"}])
    with pytest.raises(ValidationError, match="repeated: lookup"):
        ToolsConfig(tools=[{"name": "a:lookup"}, {"name": "b:lookup"}])
    with pytest.raises(ValidationError, match="max_turns"):
        ToolsConfig(max_turns=0)
    with pytest.raises(ValidationError, match="extra"):
        ToolsConfig(max_turn=3)
    code = "import sys, rlvr.tools.spec; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_the_tool_keys_are_declared_once_and_the_rollout_section_inherits_them():
    from rlvr.config.schema import RolloutConfig

    keys = ["tools", "max_turns", "max_tool_output_tokens", "call_format", "turn_scheduling", "environment",
            "environment_kwargs", "environment_sees_gold", "environment_reward_weight"]
    assert list(ToolsConfig.model_fields) == keys
    for key in keys:  # the same declaration: type, default, constraints, description
        mine, theirs = RolloutConfig.model_fields[key], ToolsConfig.model_fields[key]
        assert (mine.annotation, mine.default, mine.metadata, mine.description) == \
            (theirs.annotation, theirs.default, theirs.metadata, theirs.description)
    rollout = RolloutConfig(tools=[{"name": "python"}], max_turns=2, call_format="fenced")
    assert rollout.tools_config() == ToolsConfig(tools=[{"name": "python"}], max_turns=2, max_tool_output_tokens=256,
                                                 call_format="fenced", environment=None)
    with pytest.raises(ValidationError, match="repeated: lookup"):
        RolloutConfig(tools=[{"name": "a:lookup"}, {"name": "b:lookup"}])
    with pytest.raises(ValidationError, match="max_tool_output_tokens"):
        RolloutConfig(max_tool_output_tokens=7)


def test_call_format_auto_follows_the_chat_template():
    assert choose_format("auto", "... <tool_call> ...").name == "hermes"
    assert choose_format("auto", "{{ messages }}").name == "fenced"
    assert choose_format("auto", None).name == "fenced"
    with pytest.raises(ValueError, match="needs a chat template"):
        choose_format("hermes", None)
