"""The answers of the agents' routes (POST /v1/tool-calls, GET /v1/tools), declared
once for the OpenAPI document: a batch's results and the tool-result messages of
``?reply=`` (api/tool_results.py builds them)."""

from __future__ import annotations

from slotward.api.http.schemas import PROBLEM
from slotward.engine.rules.shapes import Field, Shape

__all__ = ["TOOL_BATCH", "TOOL_LIST", "TOOL_REPLIES"]

# What a batch of tool calls answers, and the tool-result messages of ?reply=
# (api/tool_results.py builds them).
_TOOL_RESULT = Shape(
    "ToolCallResult",
    (
        Field("index", "integer", required=True, minimum=0),
        Field("id", "string", required=True, nullable=True, description="The call's id"),
        Field("tool", "string", required=True, description="The tool's name as given"),
        Field("status", "integer", required=True, description="The call's own HTTP status"),
        Field("idempotency_key", "string", required=True, nullable=True),
        Field("replayed", "boolean", required=True, nullable=True),
        Field("body", "object", description="The tool's answer (a Hold or an Availability)"),
        Field("problem", "object", shape=PROBLEM, description="Why the call failed"),
        Field(
            "hold_status",
            "string",
            description="On a replay: the hold's status now, "
            "as the Slotward-Hold-Status header of a single call says",
        ),
    ),
)
TOOL_BATCH = Shape(
    "ToolCallBatch",
    (Field("results", "array", required=True, items=_TOOL_RESULT),),
    description="Each call of the batch, in order, with its own status",
)
_CONTENT = "The tool's answer, or its problem with what_to_do, as a JSON text"
_OPENAI_TOOL_MESSAGE = Shape(
    "OpenAIToolMessage",
    (
        Field("role", "string", required=True, enum=("tool",)),
        Field("tool_call_id", "string", required=True),
        Field("content", "string", required=True, description=_CONTENT),
    ),
)
_ANTHROPIC_TOOL_RESULT = Shape(
    "AnthropicToolResult",
    (
        Field("type", "string", required=True, enum=("tool_result",)),
        Field("tool_use_id", "string", required=True),
        Field("content", "string", required=True, description=_CONTENT),
        Field("is_error", "boolean", required=True),
    ),
)
_ANTHROPIC_TOOL_MESSAGE = Shape(
    "AnthropicToolResultMessage",
    (
        Field("role", "string", required=True, enum=("user",)),
        Field("content", "array", required=True, items=_ANTHROPIC_TOOL_RESULT),
    ),
)
_FUNCTION_CALL_OUTPUT = Shape(
    "OpenAIFunctionCallOutput",
    (
        Field("type", "string", required=True, enum=("function_call_output",)),
        Field("call_id", "string", required=True),
        Field("output", "string", required=True, description=_CONTENT),
    ),
)
TOOL_REPLIES: tuple[Shape | Field, ...] = (
    _OPENAI_TOOL_MESSAGE,
    Field("messages", "array", items=_OPENAI_TOOL_MESSAGE),
    _FUNCTION_CALL_OUTPUT,
    Field("items", "array", items=_FUNCTION_CALL_OUTPUT),
    _ANTHROPIC_TOOL_MESSAGE,
)
"""The answers of ?reply=openai (one message, a list for a batch; function_call_output
items for calls of OpenAI's Responses API) and ?reply=anthropic."""
TOOL_LIST = Field(
    "tools", "array", items=Field("tool", "object"),
    description="The tools in the format asked for (docs/agents.md)",
)  # fmt: skip
