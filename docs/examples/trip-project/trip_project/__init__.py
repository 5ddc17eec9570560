"""The trip project: the server tools its agent (agents/trip.agent.json) calls."""
