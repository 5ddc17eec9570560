"""The agent: its template, where it comes from, and the tools it names.

- :mod:`~parkway.runner.agent.template`: :class:`AgentTemplate`, the validated template;
- :mod:`~parkway.runner.agent.agent`: :class:`Agent`, an agent defined in Python, compiled
  to a template (:mod:`~parkway.runner.agent.signatures` reads its tools' signatures,
  :mod:`~parkway.runner.agent.docstrings` their docstrings,
  :mod:`~parkway.runner.agent.functions` binds them to their template entries);
- :mod:`~parkway.runner.agent.agentfile`: the agent file a server starts from;
- :mod:`~parkway.runner.agent.reference`: an agent named by path or ``module:attribute``,
  loaded, or what is wrong with the name said plainly;
- :mod:`~parkway.runner.agent.revisions`: :class:`AgentStore`, the template's versions in Redis;
- :mod:`~parkway.runner.agent.mcps`: the template's ``mcps`` section (MCP servers);
- :mod:`~parkway.runner.agent.merge`: laying a partial template over a template;
- :mod:`~parkway.runner.agent.commits`: the ``commit_config`` platform op;
- :mod:`~parkway.runner.agent.platform_ops`: the registry of platform ops;
- :mod:`~parkway.runner.agent.workflows`: the reserved workflows (``request_connection``);
- :mod:`~parkway.runner.agent.renders`: the built-in render kinds of client tools, and
  the output schemas each can answer;
- :mod:`~parkway.runner.agent.tools`: server tools' execution and :class:`ToolContext`;
- :mod:`~parkway.runner.agent.credentials`: how a tool uses a connection's token.

It imports the store and the model layer, never the engine or code mode.
"""

from parkway.runner.agent.agent import Agent, AgentModel, ApprovalDecision
from parkway.runner.agent.agentfile import (
    AgentFile,
    load_agent_file,
    make_importable,
    model_of,
    parse_agent_file,
)
from parkway.runner.agent.commits import COMMIT_CONFIG
from parkway.runner.agent.credentials import ConnectionUnavailableError, Credentials
from parkway.runner.agent.mcps import (
    McpAuth,
    McpPolicy,
    McpServer,
    canonical_resource,
    exposed_name,
    server_of,
)
from parkway.runner.agent.merge import LIST_SECTIONS, OverlayMerge, entry_identity, merge_overlay
from parkway.runner.agent.platform_ops import (
    AUTHORING_SKILLS,
    PLATFORM_OPS,
    SANDBOX_PERMISSIONS,
    PlatformOp,
    register_platform_op,
)
from parkway.runner.agent.reference import (
    agent_origin,
    is_agent_ref,
    load_agent,
    resolve_agent_ref,
)
from parkway.runner.agent.renders import (
    RENDER_CHOICE,
    RENDER_CLIENT,
    RENDER_CONNECT,
    ChoiceAnswer,
    RenderMismatch,
    choice_answer,
    render_mismatch,
)
from parkway.runner.agent.revisions import (
    AgentStore,
    Editors,
    NotAnEditorError,
    RevisionConflictError,
    check_function_tools,
    check_mcp_servers,
    check_working_copy,
)
from parkway.runner.agent.template import (
    PER_CALL,
    AgentTemplate,
    ToolSpec,
    load_template,
    load_template_json,
)
from parkway.runner.agent.tools import (
    LIVE_CANCEL,
    MAX_INPUT_ROUNDS,
    TOO_MANY_ROUNDS,
    LiveInput,
    LiveQuestion,
    ToolContext,
    ToolNeedsInput,
    ToolRun,
    execute_tool,
    input_problem,
)
from parkway.runner.agent.workflows import REQUEST_CONNECTION, RESERVED_WORKFLOWS

__all__ = [
    "AUTHORING_SKILLS",
    "COMMIT_CONFIG",
    "LIST_SECTIONS",
    "LIVE_CANCEL",
    "MAX_INPUT_ROUNDS",
    "PER_CALL",
    "PLATFORM_OPS",
    "RENDER_CHOICE",
    "RENDER_CLIENT",
    "RENDER_CONNECT",
    "REQUEST_CONNECTION",
    "RESERVED_WORKFLOWS",
    "SANDBOX_PERMISSIONS",
    "TOO_MANY_ROUNDS",
    "Agent",
    "AgentFile",
    "AgentModel",
    "AgentStore",
    "AgentTemplate",
    "ApprovalDecision",
    "ChoiceAnswer",
    "ConnectionUnavailableError",
    "Credentials",
    "Editors",
    "LiveInput",
    "LiveQuestion",
    "McpAuth",
    "McpPolicy",
    "McpServer",
    "NotAnEditorError",
    "OverlayMerge",
    "PlatformOp",
    "RenderMismatch",
    "RevisionConflictError",
    "ToolContext",
    "ToolNeedsInput",
    "ToolRun",
    "ToolSpec",
    "agent_origin",
    "canonical_resource",
    "check_function_tools",
    "check_mcp_servers",
    "check_working_copy",
    "choice_answer",
    "entry_identity",
    "execute_tool",
    "exposed_name",
    "input_problem",
    "is_agent_ref",
    "load_agent",
    "load_agent_file",
    "load_template",
    "load_template_json",
    "make_importable",
    "merge_overlay",
    "model_of",
    "parse_agent_file",
    "register_platform_op",
    "render_mismatch",
    "resolve_agent_ref",
    "server_of",
]
