"""The trip chat, recorded once against the real model and replayed in CI with no key.

``parkway_record`` (Parkway's pytest plugin: no import, no conftest line) records the
cassette on the first run and replays it on every later one; ``--record-mode`` says
which (README.md). The replay is cold: after each response that parks the run, the server
is killed with SIGKILL and a new one resumes the chat from Redis alone.
"""

from __future__ import annotations

from typing import Any

import httpx2

from parkway.transport.pytest_plugin import CassetteRecorder

CHAT = "weekend"
HELLO = {
    "id": "u1",
    "role": "user",
    "parts": [{"type": "text", "text": "Plan a weekend away: Lisbon or Oslo?"}],
}


def pending_call(client: httpx2.Client, tool: str) -> dict[str, Any]:
    """The chat's pending call of ``tool``, from the chat view (what a reloaded page sees)."""
    view = client.get(f"/api/chats/{CHAT}")
    view.raise_for_status()
    return next(
        call
        for call in view.json()["calls"]
        if call["status"] == "pending" and call["toolName"] == tool
    )


def post(client: httpx2.Client, path: str, body: dict[str, Any] | None = None) -> None:
    """POST to the server and stop the recording at once if it refuses."""
    client.post(path, json=body).raise_for_status()


def drive(client: httpx2.Client) -> None:
    """The chat, through Parkway's HTTP API, as the browser and the human would have it.

    ``client`` has the recording server's base URL and a session's bearer token. Only the
    first run (or ``--record-mode=all``) calls this; a replay sends the recorded requests.
    """
    # 1. The user asks. The model checks both forecasts (the server tool runs at once)
    #    and asks the user to choose a city: a client tool, so the run parks.
    post(client, "/api/chat", {"id": CHAT, "messages": [HELLO]})
    # 2. The browser's widget answers the client tool, and the run resumes: the model
    #    wants to book a stay, which needs a human's approval, so the run parks again.
    choice = pending_call(client, "choose_city")
    answer = {"outcome": "output", "output": {"choice": "Lisbon"}}
    post(client, f"/api/chats/{CHAT}/calls/{choice['toolCallId']}", answer)
    post(client, f"/api/chats/{CHAT}/resume")
    # 3. The human approves the booking, and the run resumes: the tool books the stay
    #    and the model answers.
    booking = pending_call(client, "book_stay")
    post(client, f"/api/chats/{CHAT}/calls/{booking['toolCallId']}", {"outcome": "approved"})
    post(client, f"/api/chats/{CHAT}/resume")


def test_the_weekend_chat_replays_cold(parkway_record: CassetteRecorder) -> None:
    parkway_record(
        "../cassettes/trip.cassette.json", drive, agent="../agents/trip.agent.json", cold=True
    )
