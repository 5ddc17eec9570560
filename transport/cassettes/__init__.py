"""Cassettes: a chat recorded once, replayed against a fresh server, cold or warm.

A cassette is a JSON file (format version 3; versions 1 and 2 are read and migrated)::

    {
      "version": 3,
      "description": "optional free text",
      "agent_file": "../agents/trip.agent.json",
      "agent_digest": "sha256:…",
      "model": "scripted",
      "agent": { …optional copy of the agent file… },
      "exchanges": [
        {"request":  {"method": "POST", "path": "/api/chat", "json": { …body… }},
         "response": {"status": 200, "chunks": [ {"type": "start", …}, … ]}},
        {"request":  {"method": "GET", "path": "/api/chat/c1/stream", "json": null},
         "response": {"status": 204}},
        {"request":  {"method": "POST", "path": "/api/agui", "json": { …RunAgentInput… }},
         "response": {"status": 200, "events": [ {"type": "RUN_STARTED", …}, … ]}}
      ]
    }

- ``agent_file`` (relative to the cassette), ``agent_digest`` and ``model`` say which
  agent produced the cassette. A replay serves the current agent file (the one named,
  or another given), so an edit to the agent is what the replay tests; the copy in
  ``agent`` only when asked. The report says whether the agent served differs from the
  one recorded.
- ``exchanges`` are the client's requests in the order they were sent, each with the
  answer it got (``chunks`` of an AI SDK stream, ``events`` of an AG-UI one, ``json``,
  ``text``, or no body).
- ``events`` (no new version: only answers to ``POST /api/agui`` have them, and a
  Parkway that predates them refuses such a cassette rather than misread it) are the
  AG-UI run's events in order, each the parsed JSON of one ``data:`` frame of its SSE
  body, as ``chunks`` are for the AI SDK.

Replaying (:func:`replay`) sends the recorded requests in order to a server started for
the replay and compares each answer with the recording. Generated ids (``msg_…``,
``call_…``, ``apr_…``) are learnt from the answers and written into later requests,
also where an AG-UI client sends them back: ``resume[].interruptId``, tool messages'
``toolCallId``, assistant messages' ``toolCalls[].id`` and the message ids made from
the runner's (``msg_…-1``, ``call_…-result``). Chat ids (an AG-UI input's ``threadId``
among them, and its ``runId``) get a per-run suffix (so parallel replays on one Redis
never meet) that is mapped back before comparing; wall-clock values (deadlines, an AG-UI
interrupt's ``expiresAt``, an event's ``timestamp``) compare as masks. ``cold=True``
kills the server with SIGKILL after every response that parks a turn (an AI SDK
``finish`` for tool calls; an AG-UI ``RUN_FINISHED`` with an interrupt, or a success
with ``pendingToolCallIds``) and starts a new process on the same Redis before the next
request: the proof that a parked run resumes from Redis alone. A cassette that cannot
prove anything (no exchanges, no turn that ends, a cold replay with no park point) is
an error, not a pass.

A real model's steps (``model_steps``, format version 3) are served from the cassette by
the replay's server (:mod:`parkway.runner.llm.tape`): no key, no network; a request to the
model that differs from the recorded one is reported by step and field. ``record_mode``
``new_episodes`` or ``all`` sends steps to the real model and records them again.

Recording: ``parkway record`` / ``parkway serve --record`` (model steps included), the
``parkway_record`` fixture, or a :class:`Recorder` on an ``httpx2`` or ``httpx`` client.
See docs/cassettes.md.
"""

from parkway.transport.cassettes._agent import ReplayAgent, replay_agent
from parkway.transport.cassettes._client_recorder import Recorder
from parkway.transport.cassettes._diff import Difference, IdTable
from parkway.transport.cassettes._format import (
    FORMAT_VERSION,
    Cassette,
    Exchange,
    RequestRecord,
    ResponseRecord,
    agent_digest,
    cassette_json,
    load_cassette,
    parse_cassette,
    save_cassette,
)
from parkway.transport.cassettes._replay import (
    ReplayReport,
    check_replayable,
    compare_response,
    replay,
)
from parkway.transport.cassettes._replay_server import (
    CassetteError,
    ReplayServer,
    ServerProcess,
    scratch_server,
)
from parkway.transport.cassettes._server_recorder import (
    CassetteRecording,
    CassetteWriter,
    is_recorded,
    recording_writer,
)
from parkway.transport.cassettes._tapes import (
    RECORD_MODES,
    ModelFinding,
    load_tape,
    with_model_steps,
)

__all__ = [
    "FORMAT_VERSION",
    "RECORD_MODES",
    "Cassette",
    "CassetteError",
    "CassetteRecording",
    "CassetteWriter",
    "Difference",
    "Exchange",
    "IdTable",
    "ModelFinding",
    "Recorder",
    "ReplayAgent",
    "ReplayReport",
    "ReplayServer",
    "RequestRecord",
    "ResponseRecord",
    "ServerProcess",
    "agent_digest",
    "cassette_json",
    "check_replayable",
    "compare_response",
    "is_recorded",
    "load_cassette",
    "load_tape",
    "parse_cassette",
    "recording_writer",
    "replay",
    "replay_agent",
    "save_cassette",
    "scratch_server",
    "with_model_steps",
]
