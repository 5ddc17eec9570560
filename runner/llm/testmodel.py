"""The test model: calls every tool once with valid arguments, then sums up.

For a test that wants to know the agent's tools work end to end without writing a
script: in the first step of a turn the model calls each offered tool (or the ones
named) once, all in one parallel step, with arguments made from the tool's input schema
(:func:`~parkway.runner.llm.samples.sample`); once every one of them has a result (a
parked call's outcome included), it answers with text listing the results. Like every
model it is stateless: a resumed run, in any process, goes on from the conversation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from parkway.runner.canonical import canonical_json
from parkway.runner.errors import ModelError
from parkway.runner.llm.function import FunctionInfo, ToolCall, reply_events
from parkway.runner.llm.model import ModelEvent, ModelRequest, ModelStepEnd
from parkway.runner.llm.samples import SampleError, sample

__all__ = ["TestModel"]


class TestModel:
    """Calls every tool once with schema-valid arguments, then answers with a summary.

    ``tools`` names the tools to call (default: every tool offered, in the template's
    order); ``args`` gives a tool's arguments instead of generating them (for a schema
    no sample satisfies, or input a test wants); ``text`` replaces the summary; ``seed``
    varies the generated arguments (the same seed gives the same arguments).
    """

    __test__ = False  # a product class, not a test for pytest to collect

    def __init__(
        self,
        *,
        tools: Sequence[str] | None = None,
        args: Mapping[str, Any] | None = None,
        text: str | None = None,
        seed: int = 0,
    ) -> None:
        self.tools = None if tools is None else tuple(tools)
        self.args = dict(args or {})
        self.text = text
        self.seed = seed

    def __repr__(self) -> str:
        return "TestModel()"

    def arguments(self, name: str, input_schema: Mapping[str, Any]) -> Any:
        """The arguments this model calls tool ``name`` with."""
        if name in self.args:
            return self.args[name]
        try:
            return sample(input_schema, seed=self.seed)
        except SampleError as exc:
            raise ModelError(
                f"TestModel cannot make arguments for tool {name!r}: {exc}; give them with "
                f"TestModel(args={{{name!r}: {{...}}}})"
            ) from None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        info = FunctionInfo(
            chat_id=request.chat_id,
            call_index=request.call_index,
            instructions=request.instructions,
            tools=request.tools,
            messages=request.messages,
        )
        offered = {tool.name: tool for tool in request.tools}
        wanted = self.tools if self.tools is not None else tuple(offered)
        missing = [name for name in wanted if name not in offered]
        if missing:
            raise ModelError(
                f"TestModel was asked to call {', '.join(missing)}, which the agent does not "
                f"offer (it offers: {', '.join(offered) or 'no tools'})"
            )
        called = {call.name for call in info.calls_since_user()}
        todo = [name for name in wanted if name not in called]
        if todo:
            calls = [ToolCall(n, self.arguments(n, offered[n].input_schema)) for n in todo]
            for event in reply_events(calls):
                yield event
        else:
            for event in reply_events(self.text if self.text is not None else _summary(info)):
                yield event
        yield ModelStepEnd(model="test")


def _summary(info: FunctionInfo) -> str:
    """One line per tool result of this turn: the tool's name and its result as JSON."""
    results = info.results_since_user()
    if not results:
        return "No tools were called."
    lines = [f"{r.tool_name}: {canonical_json(r.result)}" for r in results]
    return "Results:\n" + "\n".join(lines)
