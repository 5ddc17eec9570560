"""The AI SDK wire: the UI message stream protocol that ``useChat`` speaks.

- :mod:`~parkway.transport.aisdk.chunks`: one wire model per chunk type;
- :mod:`~parkway.transport.aisdk.encoder`: runner events in, chunks out;
- :mod:`~parkway.transport.aisdk.streaming`: SSE framing of a run's events;
- :mod:`~parkway.transport.aisdk.uimessages`: reading what a client POSTs, and a chat's
  messages for a reload;
- :mod:`~parkway.transport.aisdk.rebuild`: the chunks that rebuild an assistant message
  for ``resumeStream``.
"""

from parkway.transport.aisdk import chunks
from parkway.transport.aisdk.chunks import Chunk, ErrorChunk
from parkway.transport.aisdk.encoder import WIDGET_PART, encode_event
from parkway.transport.aisdk.rebuild import replay_message
from parkway.transport.aisdk.streaming import (
    Describer,
    aclose,
    failure_text,
    follow_response,
    replay_response,
    run_events,
    stream_response,
)
from parkway.transport.aisdk.uimessages import ChatBody, ChatPost, chat_messages, parse_chat_post

__all__ = [
    "WIDGET_PART",
    "ChatBody",
    "ChatPost",
    "Chunk",
    "Describer",
    "ErrorChunk",
    "aclose",
    "chat_messages",
    "chunks",
    "encode_event",
    "failure_text",
    "follow_response",
    "parse_chat_post",
    "replay_message",
    "replay_response",
    "run_events",
    "stream_response",
]
