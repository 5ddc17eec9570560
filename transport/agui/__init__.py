"""The AG-UI wire (AG-UI 1.0, ``POST /api/agui``), beside the AI SDK one.

- :mod:`~parkway.transport.agui.encoder`: runner events in, AG-UI events out;
- :mod:`~parkway.transport.agui.messages`: reading a ``RunAgentInput``, a chat as AG-UI
  messages, parked calls as interrupts, and the checks of a resume;
- :mod:`~parkway.transport.agui.streaming`: SSE framing of one AG-UI run.
"""

from parkway.transport.agui.encoder import AguiEncoder
from parkway.transport.agui.messages import (
    AguiPost,
    ResumeProblem,
    agui_messages,
    interrupt_of,
    parse_agui_post,
    plan_resume,
    steps_of,
)
from parkway.transport.agui.streaming import agui_response

__all__ = [
    "AguiEncoder",
    "AguiPost",
    "ResumeProblem",
    "agui_messages",
    "agui_response",
    "interrupt_of",
    "parse_agui_post",
    "plan_resume",
    "steps_of",
]
