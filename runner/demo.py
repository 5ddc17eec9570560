"""The built-in demo agent: one of each kind of tool, driven by the scripted model.

Shown by ``parkway serve`` without ``--agent``: a server function tool
(``get_weather``), a client tool (``choose_option``), ``request_connection`` and an
approval-gated function tool (``publish_report``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEMO_AGENT", "get_weather", "publish_report"]

_FORECASTS = {
    "lisbon": {"temperature_c": 21, "sky": "sunny"},
    "oslo": {"temperature_c": 4, "sky": "snow"},
    "paris": {"temperature_c": 14, "sky": "cloudy"},
}


def get_weather(tool_input: dict[str, Any]) -> dict[str, Any]:
    """Today's weather for a city (a fixed table: the demo needs no network)."""
    city = str(tool_input["city"])
    forecast = _FORECASTS.get(city.lower(), {"temperature_c": 18, "sky": "partly cloudy"})
    return {"city": city, **forecast}


def publish_report(tool_input: dict[str, Any]) -> dict[str, Any]:
    """Publish a short report (the demo only echoes what it would publish)."""
    return {
        "published": True,
        "title": tool_input["title"],
        "words": len(tool_input["body"].split()),
    }


DEMO_AGENT: dict[str, Any] = {
    "template": {
        "instructions": "You are the Parkway demo agent. Show each kind of tool call once.",
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "ref": "runner.demo:get_weather",
                "description": "Today's weather for a city.",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "minLength": 1}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
            {
                "type": "client",
                "name": "choose_option",
                "description": "Ask the user to pick one of a few options.",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "question": {"type": "string"},
                        "options": {
                            "type": "array",
                            "items": {"type": "string"},
                            "minItems": 2,
                        },
                    },
                    "required": ["question", "options"],
                    "additionalProperties": False,
                },
                "output_schema": {
                    "type": "object",
                    "properties": {"choice": {"type": "string"}},
                    "required": ["choice"],
                    "additionalProperties": False,
                },
                "render": {"kind": "choice"},
            },
            {"@ag.embed": {"@ag.references": {"workflow": {"slug": "__ag__request_connection"}}}},
            {
                "type": "function",
                "name": "publish_report",
                "ref": "runner.demo:publish_report",
                "description": "Publish a short report. Needs the user's approval.",
                "needs_approval": True,
                "allow_edits": True,
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string", "minLength": 1},
                        "body": {"type": "string"},
                    },
                    "required": ["title", "body"],
                    "additionalProperties": False,
                },
            },
        ],
    },
    "model": {
        "scripted": {
            "turns": [
                [
                    {
                        "text": (
                            "Hello! I'll check the weather and ask you to pick a city to report on."
                        )
                    },
                    {"tool_call": {"name": "get_weather", "input": {"city": "Lisbon"}}},
                    {
                        "tool_call": {
                            "name": "choose_option",
                            "input": {
                                "question": "Which city should the report cover?",
                                "options": ["Lisbon", "Oslo", "Paris"],
                            },
                        }
                    },
                ],
                [
                    {"text": "Thanks. Results so far: {{last_tool_results}}. "},
                    {"text": "To file the report I need a connection to your demo account."},
                    {
                        "tool_call": {
                            "name": "request_connection",
                            "input": {
                                "provider": "demo",
                                "scopes": ["repo"],
                                "reason": "File the weather report as an issue.",
                            },
                        }
                    },
                ],
                [
                    {"text": "Connection result: {{last_tool_results}}. "},
                    {"text": "Here is the report I'd like to publish."},
                    {
                        "tool_call": {
                            "name": "publish_report",
                            "input": {
                                "title": "Weather report",
                                "body": "Sunny and 21 degrees in Lisbon today.",
                            },
                        }
                    },
                ],
                [{"text": "All done: {{last_tool_results}}. You said: {{last_user_text}}"}],
            ]
        }
    },
}
