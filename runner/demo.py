"""The built-in demo agent: one of each kind of tool, driven by the scripted model.

Shown by ``parkway serve`` without ``--agent``: a server function tool
(``get_weather``), a client tool (``choose_option``), ``request_connection``, an
approval-gated function tool (``publish_report``), and a large result (``get_sales``,
kept as an artifact) summarised by reviewed code (``execute_code``).

The script reads the chat as it goes (the path placeholders and conditions of
:mod:`parkway.runner.llm.scripted`): it gives Lisbon's weather and asks which city the report should
cover, looks up that city's weather while asking for a connection, greets the connected
account or says why there is none, asks approval for a report on the chosen city, says
whether it was published, then fetches a month of sales and asks to run a short program
that summarises them, and ends with the summary.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEMO_AGENT", "SALES_SUMMARY_CODE", "get_sales", "get_weather", "publish_report"]

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


_CITIES = ("Lisbon", "Oslo", "Paris", "Porto", "Bergen", "Lyon")
_PRODUCTS = ("umbrella", "sunglasses", "raincoat", "scarf", "sun hat")


def get_sales(tool_input: dict[str, Any]) -> dict[str, Any]:
    """A month of the demo shop's orders: about 600 of them, some 60 KB of JSON, so the
    result is kept as an artifact and summarised by code (a fixed, seeded table)."""
    month = str(tool_input.get("month") or "2026-10")
    orders = []
    for n in range(600):
        city = _CITIES[(n * 7 + n // 5) % len(_CITIES)]
        orders.append(
            {
                "order": f"{month}-{n:04d}",
                "day": 1 + n % 28,
                "city": city,
                "product": _PRODUCTS[(n * 3 + len(city)) % len(_PRODUCTS)],
                "amount_eur": round(5 + (n * 37 % 113) + (n % 7) * 0.25, 2),
            }
        )
    return {"month": month, "currency": "EUR", "orders": orders}


# The program the demo asks to run on the sales artifact (execute_code).
SALES_SUMMARY_CODE = """\
from collections import Counter

orders = artifacts.json(artifacts.names()[0])["orders"]
totals = Counter()
for order in orders:
    totals[order["city"]] += order["amount_eur"]
city, total = totals.most_common(1)[0]
result({"orders": len(orders), "top_city": city, "top_total_eur": round(total, 2)})
"""

# Filled by the scripted model from the most recent ``get_weather`` result: Lisbon's in
# the first answer, the chosen city's in the report.
_FORECAST = (
    "Today in {{result.get_weather.city}}: {{result.get_weather.sky}}, "
    "{{result.get_weather.temperature_c}} °C."
)
# The city the user chose; Lisbon if the choice was declined or timed out.
_CHOSEN = "{{result.choose_option.choice|Lisbon}}"

DEMO_AGENT: dict[str, Any] = {
    "template": {
        "instructions": (
            "You are the Parkway demo agent. You help the user file a short weather report, "
            "and on the way you show each kind of tool call once. First check today's "
            "weather in Lisbon with get_weather and, in the same step, ask the user which "
            "city the report should cover with choose_option (options Lisbon, Oslo and "
            "Paris). Then get the weather for the chosen city and ask for a connection to "
            "the user's demo account with request_connection (provider 'demo', scope "
            "'repo'). Then propose the report with publish_report: title 'Weather in "
            "<city>', a one-sentence body with the sky and temperature. Last, fetch the "
            "sales of 2026-10 with get_sales; the result is large and comes back as an "
            "artifact, so summarise it with execute_code (pass its artifact_id in inputs): "
            "the number of orders and the city that sold the most. If a tool result says "
            "the user declined, denied or did not answer, accept it and carry on without "
            "it. Keep every reply to one or two plain sentences."
        ),
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "ref": "parkway.runner.demo:get_weather",
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
                "name": "get_sales",
                "ref": "parkway.runner.demo:get_sales",
                "description": "A month of the demo shop's orders (large: it comes back as an "
                "artifact to read with execute_code).",
                "input_schema": {
                    "type": "object",
                    "properties": {"month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}},
                    "additionalProperties": False,
                },
            },
            {"type": "platform", "op": "execute_code"},
            {
                "type": "function",
                "name": "publish_report",
                "ref": "parkway.runner.demo:publish_report",
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
                    {"text": f"{_FORECAST} "},
                    {
                        "if": "result.choose_option.choice",
                        "text": "You picked {{result.choose_option.choice}}, so the report "
                        "will cover {{result.choose_option.choice}}. ",
                    },
                    {
                        "unless": "result.choose_option.choice",
                        "text": "No city was picked, so the report will cover Lisbon. ",
                    },
                    {"text": "To file it, I'd like a connection to your demo account."},
                    {"tool_call": {"name": "get_weather", "input": {"city": _CHOSEN}}},
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
                    {
                        "if": "result.request_connection.connected",
                        "text": "Connected as {{result.request_connection.account}}. ",
                    },
                    {
                        "unless": "result.request_connection.connected",
                        "text": "No connection this time "
                        "({{result.request_connection.reason|no reason given}}); "
                        "I'll publish without it. ",
                    },
                    {
                        "text": "Here is the report on {{result.get_weather.city}} "
                        "for your approval."
                    },
                    {
                        "tool_call": {
                            "name": "publish_report",
                            "input": {
                                "title": "Weather in {{result.get_weather.city}}",
                                "body": _FORECAST,
                            },
                        }
                    },
                ],
                [
                    {
                        "if": "result.publish_report.published",
                        "text": "Published “{{result.publish_report.title}}” "
                        "({{result.publish_report.words}} words). ",
                    },
                    {
                        "unless": "result.publish_report.published",
                        "text": "OK, the report stays unpublished "
                        "({{result.publish_report.reason|not approved}}). ",
                    },
                    {"text": "One last stop: last month's sales, to show reviewed code."},
                    {"tool_call": {"name": "get_sales", "input": {"month": "2026-10"}}},
                ],
                [
                    {
                        "text": "The sales came back as an artifact "
                        "({{result.get_sales.bytes|many}} bytes), so here is a short program "
                        "that summarises them, for your review."
                    },
                    {
                        "tool_call": {
                            "name": "execute_code",
                            "input": {
                                "code": SALES_SUMMARY_CODE,
                                "inputs": ["{{result.get_sales.artifact_id}}"],
                            },
                        }
                    },
                ],
                [
                    {
                        "if": "result.execute_code.result.top_city",
                        "text": "{{result.execute_code.result.orders}} orders; "
                        "{{result.execute_code.result.top_city}} sold the most "
                        "({{result.execute_code.result.top_total_eur}} €). ",
                    },
                    {
                        "unless": "result.execute_code.result.top_city",
                        "text": "The summary did not run "
                        "({{result.execute_code.message|not approved}}). ",
                    },
                    {
                        "text": "That was the whole tour: a server tool, a choice, a connection, "
                        "an approval and reviewed code."
                    },
                ],
            ]
        }
    },
    # The playground's empty chat offers it (a button that sends it, and the composer's
    # placeholder): the script answers whatever is sent, a real model follows it.
    "suggestions": ["Help me file a weather report"],
}
