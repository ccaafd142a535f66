"""The envelopes ``POST /v1/tool-calls`` takes, declared once: api/envelopes.py
validates with them and the OpenAPI document is generated from them."""

from __future__ import annotations

from slotward.engine.rules.fingerprint import MAX_STEP
from slotward.engine.rules.shapes import Field, Shape
from slotward.engine.tools import CREATE_HOLD, NAMES

__all__ = [
    "ANTHROPIC_MESSAGE",
    "ANTHROPIC_SINGLE",
    "ANTHROPIC_USE",
    "FUNCTION_CALL",
    "FUNCTION_CALL_SINGLE",
    "GENERIC",
    "MAX_CALLS",
    "OPENAI_CALL",
    "OPENAI_MESSAGE",
    "OPENAI_SINGLE",
    "RESPONSE_OUTPUT",
    "SHAPES",
]

MAX_CALLS = 16
"""At most this many tool calls in one batch (a model emits a handful)."""
_MAX_BLOCKS = 64  # content blocks of an Anthropic message, text and thinking included

_WORKFLOW = Field(
    "workflow_id", "string", min_length=1, max_length=255,
    description="The agent workflow (conversation, task) the call belongs to; "
    f"{CREATE_HOLD.name} needs it",
)  # fmt: skip
_STEP = Field(
    "step", "integer", nullable=True, minimum=0, maximum=MAX_STEP, code="invalid_step",
    description="The step within the workflow; a deliberate re-booking uses a new step",
)  # fmt: skip
_ID = Field(
    "id", "string", min_length=1, max_length=256,
    description="The call's id as the model gave it; a reply references it. Never part "
    "of the idempotency key",
)  # fmt: skip
_NAME = Field("name", "string", required=True, min_length=1, max_length=128)
_BESIDE = (_WORKFLOW, _STEP)
# The model APIs' wrappers (messages, responses, their blocks and items) are the
# vendor's: a member they add in a new SDK release carries no intent, so an
# undeclared one is ignored, not refused. Only the declared members are read,
# and those stay checked; the arguments and slotward's own envelope stay strict.
_VENDOR = True

GENERIC = Shape(
    "ToolCall",
    (*_BESIDE, Field("tool", "string", required=True, enum=NAMES),
     Field("arguments", "object", required=True), _ID),
    description="slotward's own envelope; arguments are the tool endpoint's body fields",
)  # fmt: skip
_FUNCTION = Shape(
    "OpenAIFunction",
    (_NAME, Field("arguments", "any", required=True,
                  description="A JSON text of an object (as OpenAI sends it), or the object")),
)  # fmt: skip
OPENAI_CALL = Shape(
    "OpenAIToolCall",
    (_ID, Field("type", "string", required=True, enum=("function",)),
     Field("function", "object", required=True, shape=_FUNCTION)),
    description="One entry of an OpenAI assistant message's tool_calls",
    additional=_VENDOR,
)  # fmt: skip
OPENAI_SINGLE = Shape(
    "OpenAIToolCallEnvelope",
    (*_BESIDE, *OPENAI_CALL.fields),
    description="An OpenAI tool call with workflow_id and step beside it",
    additional=_VENDOR,
)
ANTHROPIC_USE = Shape(
    "AnthropicToolUse",
    (_ID, Field("type", "string", required=True, enum=("tool_use",)), _NAME,
     Field("input", "any", required=True, description="The tool's arguments, an object")),
    description="An Anthropic tool_use content block",
    additional=_VENDOR,
)  # fmt: skip
ANTHROPIC_SINGLE = Shape(
    "AnthropicToolUseEnvelope",
    (*_BESIDE, *ANTHROPIC_USE.fields),
    description="An Anthropic tool_use block with workflow_id and step beside it",
    additional=_VENDOR,
)
_ASSISTANT = Field("role", "string", enum=("assistant",))
OPENAI_MESSAGE = Shape(
    "OpenAIAssistantMessage",
    (*_BESIDE, _ASSISTANT, Field("content", "any", description="Ignored"),
     Field("refusal", "any", description="Ignored"),
     Field("annotations", "any", description="Ignored"),
     Field("audio", "any", description="Ignored"),
     Field("function_call", "any", description="Ignored (deprecated): tool_calls run"),
     Field("tool_calls", "array", required=True, min_items=1, max_items=MAX_CALLS,
           items=OPENAI_CALL)),
    description="An OpenAI assistant message: its tool_calls run in order",
    additional=_VENDOR,
)  # fmt: skip
ANTHROPIC_MESSAGE = Shape(
    "AnthropicAssistantMessage",
    (*_BESIDE, _ASSISTANT,
     Field("content", "array", required=True, min_items=1, max_items=_MAX_BLOCKS,
           items=Field("block", "object", description="tool_use blocks (AnthropicToolUse) "
                       "run in order; text, thinking and redacted_thinking are skipped")),
     Field("id", "string", max_length=256, description="The message's id; ignored"),
     Field("type", "string", enum=("message",)), Field("model", "string", max_length=256),
     Field("stop_reason", "any"), Field("stop_sequence", "any"), Field("usage", "any"),
     Field("container", "any"), Field("context_management", "any")),
    description=f"An Anthropic assistant message: its tool_use blocks (at most {MAX_CALLS}) "
    "run in order",
    additional=_VENDOR,
)  # fmt: skip
# OpenAI's Responses API: a function_call output item, and a response's output.
FUNCTION_CALL = Shape(
    "OpenAIFunctionCallItem",
    (Field("type", "string", required=True, enum=("function_call",)),
     Field("call_id", "string", required=True, min_length=1, max_length=256,
           description="The call's id (call_...): the reply's call_id; never part of the key"),
     _NAME, _FUNCTION.fields[1],
     Field("id", "string", max_length=256, description="The item's id (fc_...); ignored"),
     Field("status", "string", max_length=32, description="Ignored")),
    description="A function_call item of an OpenAI Responses API output",
    additional=_VENDOR,
)  # fmt: skip
FUNCTION_CALL_SINGLE = Shape(
    "OpenAIFunctionCallEnvelope",
    (*_BESIDE, *FUNCTION_CALL.fields),
    description="An OpenAI Responses API function_call with workflow_id and step beside it",
    additional=_VENDOR,
)
RESPONSE_OUTPUT = Shape(
    "OpenAIResponseOutput",
    (*_BESIDE,
     Field("output", "array", required=True, min_items=1, max_items=_MAX_BLOCKS,
           items=Field("item", "object", description="function_call items "
                       "(OpenAIFunctionCallItem) run in order; reasoning and message items "
                       "are skipped"))),
    description=f"An OpenAI Responses API response's output: its function_call items (at most "
    f"{MAX_CALLS}) run in order",
    additional=_VENDOR,
)  # fmt: skip
SHAPES: tuple[Shape, ...] = (
    GENERIC, OPENAI_SINGLE, ANTHROPIC_SINGLE, FUNCTION_CALL_SINGLE, OPENAI_MESSAGE,
    ANTHROPIC_MESSAGE, RESPONSE_OUTPUT,
)  # fmt: skip
"""Every envelope the route takes, for the OpenAPI document."""
