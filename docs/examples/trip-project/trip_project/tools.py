"""The trip agent's server tools, named in agents/trip.agent.json by ``ref``.

Parkway imports them from the project root: run ``parkway serve``, ``parkway replay``
and pytest from this folder (or install the project). Both are deterministic, as a tool
behind a cassette must be: the replay compares what they return with the recording.
"""

from __future__ import annotations

from typing import Any

# A fixed table rather than a weather service: the same city always gets the same answer.
_FORECASTS = {
    "lisbon": {"sky": "sunny", "high_c": 24},
    "oslo": {"sky": "light rain", "high_c": 11},
}


def forecast(tool_input: dict[str, Any]) -> dict[str, Any]:
    """The weekend's forecast for a city, from the fixed table."""
    city = str(tool_input["city"])
    return {"city": city, **_FORECASTS.get(city.lower(), {"sky": "unknown", "high_c": None})}


def book_stay(tool_input: dict[str, Any]) -> dict[str, Any]:
    """Book a stay (the example books nothing: it returns the booking it would make).
    The agent file marks this tool ``needs_approval``, so it runs only once a human
    approved the call."""
    city, nights = str(tool_input["city"]), int(tool_input["nights"])
    return {"booked": True, "reference": f"TRIP-{city[:3].upper()}-{nights}N"}
