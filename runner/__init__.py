"""The Parkway runner: the agent loop, tools, parking, settling and resuming, on Redis.

It knows nothing of HTTP, SSE or any wire protocol; ``transport`` and ``widgets_api``
build on it.
"""

from parkway.runner.agent.agentfile import AgentFile, load_agent_file, parse_agent_file
from parkway.runner.store.artifacts import Artifact, ArtifactStore
from parkway.runner.canonical import canonical_json, is_plain_json, parked_call_key
from parkway.runner.codemode.library import LIST_FUNCTIONS, SAVE_FUNCTION, FunctionLibrary
from parkway.runner.codemode.op import EXECUTE_CODE
from parkway.runner.codemode.runtime import CodeMode
from parkway.runner.agent.commits import COMMIT_CONFIG
from parkway.runner.store.client import RedisClient, connect
from parkway.runner.agent.credentials import ConnectionUnavailableError, Credentials
from parkway.runner.store.embedded import EmbeddedRedis
from parkway.runner.errors import (
    AnswerMismatchError,
    CallerError,
    CallNotFoundError,
    ChatBusyError,
    ChatNotFoundError,
    ConflictError,
    DuplicateMessageError,
    IncompatibleStateError,
    InvalidOutcomeError,
    NothingToResumeError,
    NotPlainJSONError,
    OutcomeNotAllowedError,
    ParkwayError,
    SettleConflictError,
    ShuttingDownError,
    StateError,
    TemplateError,
    ToolError,
)
from parkway.runner.events import (
    ApprovalRequested,
    CallParked,
    Event,
    MessageFinished,
    MessageStarted,
    RunFailed,
    StepFinished,
    StepStarted,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolCallIssued,
    ToolDenied,
    ToolFailed,
    ToolInputRejected,
    ToolSucceeded,
)
from parkway.runner.store.history import UNKNOWN_RESULT
from parkway.runner.store.keys import ChatKeys, chat_keys, check_chat_id
from parkway.runner.engine.runner import Answer, AnswerReport, Run, Runner, RunnerConfig, SettleResult
from parkway.runner.llm.model import (
    AssistantTurn,
    Model,
    ModelEvent,
    ModelMessage,
    ModelRequest,
    ModelTextDelta,
    ModelToolCall,
    ToolDescription,
    ToolResult,
    UserTurn,
)
from parkway.runner.outcomes import model_result, normalize_outcome
from parkway.runner.parking import ParkedCall
from parkway.runner.agent.platform_ops import PLATFORM_OPS, PlatformOp, register_platform_op
from parkway.runner.llm.scripted import END_OF_SCRIPT, ScriptedModel
from parkway.runner.engine.settling import Settled, SettleListener
from parkway.runner.store.chats import ChatRecord, ChatStore
from parkway.runner.engine.sweeper import Sweeper, SweepReport
from parkway.runner.agent.template import AgentTemplate, ToolSpec, load_template
from parkway.runner.agent.tools import ToolContext

__all__ = [
    "END_OF_SCRIPT",
    "PLATFORM_OPS",
    "UNKNOWN_RESULT",
    "AgentFile",
    "AgentTemplate",
    "Answer",
    "AnswerMismatchError",
    "AnswerReport",
    "ApprovalRequested",
    "Artifact",
    "ArtifactStore",
    "AssistantTurn",
    "CallNotFoundError",
    "CallParked",
    "CallerError",
    "ChatBusyError",
    "ChatKeys",
    "ChatNotFoundError",
    "ChatRecord",
    "ChatStore",
    "CodeMode",
    "ConflictError",
    "ConnectionUnavailableError",
    "Credentials",
    "DuplicateMessageError",
    "EmbeddedRedis",
    "Event",
    "FunctionLibrary",
    "IncompatibleStateError",
    "InvalidOutcomeError",
    "MessageFinished",
    "MessageStarted",
    "Model",
    "ModelEvent",
    "ModelMessage",
    "ModelRequest",
    "ModelTextDelta",
    "ModelToolCall",
    "NotPlainJSONError",
    "NothingToResumeError",
    "OutcomeNotAllowedError",
    "ParkedCall",
    "ParkwayError",
    "PlatformOp",
    "RedisClient",
    "Run",
    "RunFailed",
    "Runner",
    "RunnerConfig",
    "ScriptedModel",
    "SettleConflictError",
    "SettleListener",
    "SettleResult",
    "Settled",
    "ShuttingDownError",
    "StateError",
    "StepFinished",
    "StepStarted",
    "SweepReport",
    "Sweeper",
    "TemplateError",
    "TextDelta",
    "TextEnded",
    "TextStarted",
    "ToolCallIssued",
    "ToolContext",
    "ToolDenied",
    "ToolDescription",
    "ToolError",
    "ToolFailed",
    "ToolInputRejected",
    "ToolResult",
    "ToolSpec",
    "ToolSucceeded",
    "UserTurn",
    "canonical_json",
    "chat_keys",
    "check_chat_id",
    "connect",
    "is_plain_json",
    "load_agent_file",
    "load_template",
    "model_result",
    "normalize_outcome",
    "parked_call_key",
    "parse_agent_file",
    "register_platform_op",
]

# The built-in platform ops (runner/agent/platform_ops.py says why the registry does not import them).
for _op in (COMMIT_CONFIG, EXECUTE_CODE, SAVE_FUNCTION, LIST_FUNCTIONS):
    register_platform_op(_op)
