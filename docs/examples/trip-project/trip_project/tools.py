"""The trip agent's server tools, declared on the agent in trip_project/agent.py.

Parkway imports them from the project root: run ``parkway serve``, ``parkway replay``
and pytest from this folder (or install the project). Both are deterministic, as a tool
behind a cassette must be: the replay compares what they return with the recording.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

# A fixed table rather than a weather service: the same city always gets the same answer.
_FORECASTS = {
    "lisbon": {"sky": "sunny", "high_c": 24},
    "oslo": {"sky": "light rain", "high_c": 11},
}


def forecast(city: str) -> dict[str, Any]:
    """The weekend's forecast for a city.

    Args:
        city: the city's name, as the user wrote it.
    """
    return {"city": city, **_FORECASTS.get(city.lower(), {"sky": "unknown", "high_c": None})}


# The example books nothing: it returns the booking it would make. The agent asks a
# human's approval first (trip_project/agent.py), so it runs only once one approved.
def book_stay(city: str, nights: Annotated[int, Field(ge=1)]) -> dict[str, Any]:
    """Book a stay in a city for some nights.

    Args:
        city: where to stay.
        nights: how many nights.
    """
    return {"booked": True, "reference": f"TRIP-{city[:3].upper()}-{nights}N"}
