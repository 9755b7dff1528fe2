"""The tool interface and registry: schemas, validation worded for the model, registered Python functions."""

import pytest

from agents.tools import ToolCallContext, ToolResult, get_tool, python_tool, tools_for
from agents.tools.base import Tool
from agents.tools.registry import register_tool


@python_tool(
    name="test_add",
    description_en="Add two numbers.",
    description_zh="两数相加。",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)
def _add(a: float, b: float, call: ToolCallContext) -> ToolResult:
    return ToolResult(content={"sum": a + b}, context={"last_sum": a + b, "seen": call.context.get("seen")})


def test_registered_function_is_a_tool_with_a_schema_in_both_languages():
    tool = get_tool("test_add")
    assert tool is not None
    assert tool.openai_schema("en")["function"] == {
        "name": "test_add",
        "description": "Add two numbers.",
        "parameters": tool.parameters,
    }
    assert tool.openai_schema("zh-hans")["function"]["description"] == "两数相加。"


def test_validation_errors_name_the_argument():
    tool = get_tool("test_add")
    assert tool.validation_errors({"a": 1, "b": 2}) == []
    errors = tool.validation_errors({"a": "one"})
    assert any(e.startswith("a:") for e in errors)
    assert any("'b' is a required property" in e for e in errors)
    assert tool.validation_errors({"a": 1, "b": 2, "c": 3})  # additionalProperties


async def test_run_passes_the_tool_context(tenant):
    result = await get_tool("test_add").run({"a": 2, "b": 3}, ToolCallContext(tenant=tenant, context={"seen": "x"}))
    assert result.content == {"sum": 5}
    assert result.context == {"last_sum": 5, "seen": "x"}
    assert result.content_text() == '{"sum": 5}'


def test_tools_for_keeps_order_and_skips_unknown_names(tenant):
    assert [t.name for t in tools_for(["nope", "test_add"], tenant=tenant)] == ["test_add"]


def test_a_name_cannot_be_taken_by_another_tool_class():
    class Other(Tool):
        name = "test_add"

    with pytest.raises(ValueError, match="already registered"):
        register_tool(Other)


def test_another_function_cannot_take_a_registered_name():
    def other(a: float, b: float) -> float:
        return a - b

    with pytest.raises(
        ValueError, match=r"'test_add' is already registered in the tools .* by tests\.agents\.test_tools"
    ):
        python_tool(name="test_add", description_en="Subtract.")(other)
    assert get_tool("test_add").func is _add
