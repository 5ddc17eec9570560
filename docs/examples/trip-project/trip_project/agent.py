"""The trip agent, in Python. ``parkway serve --agent trip_project.agent:agent`` serves it;
agents/trip.agent.json is its exported form (``parkway agent export
trip_project.agent:agent --agent-file``), which the cassette test replays."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from parkway.runner import Agent
from trip_project import tools

agent = Agent(
    "trip",
    instructions=(
        "You plan weekend trips. Check the forecast of each city the user names, ask the "
        "user to choose one, then book the stay."
    ),
    model={"name": "anthropic:claude-sonnet-4-5", "settings": {"thinking": "low"}},
)

agent.tool(tools.forecast)
agent.tool(tools.book_stay, needs_approval=True)


class Choice(BaseModel):
    choice: str


@agent.client_tool(render="choice")
def choose_city(question: str, options: Annotated[list[str], Field(min_length=2)]) -> Choice:
    """Ask the user to choose one of the cities.

    Args:
        question: the question shown above the options.
        options: the cities to choose from.
    """
    raise NotImplementedError  # the browser answers it
