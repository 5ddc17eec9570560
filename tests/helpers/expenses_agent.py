"""An agent defined in Python, for the tests of parkway.runner.Agent
(tests/runner/test_python_agent.py): typed tools, a per-call approval, a client tool.

Its tools record what they received (the arguments' types included) in ``RECEIVED``, in
this process's memory: the tests that read it run turns in-process.
"""

from __future__ import annotations

import dataclasses
from datetime import date
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from parkway.runner import Agent, ToolContext, ToolError

RECEIVED: list[dict[str, Any]] = []

agent = Agent(
    "expenses",
    instructions="You file and reimburse expenses.",
    model="anthropic:claude-sonnet-4-6",
)


class Currency(StrEnum):
    EUR = "EUR"
    USD = "USD"


class Expense(BaseModel):
    """One expense as the employee reports it."""

    amount: Annotated[float, Field(gt=0)]
    currency: Currency = Currency.EUR
    spent_on: date
    note: str = ""


class Receipt(TypedDict):
    expense_id: str
    total: float


@dataclasses.dataclass
class Filed:
    expense_id: str
    category: str


def over_100_eur(amount: float, currency: Currency) -> bool:
    """Only reimbursements above 100 EUR (or in another currency) need a human."""
    return currency is not Currency.EUR or amount > 100


@agent.tool
def file_expense(
    ctx: ToolContext,
    expense: Expense,
    category: Literal["travel", "meals", "other"] = "other",
) -> Filed:
    """File an expense report.

    Args:
        expense: The expense, as the employee reported it.
        category: Which budget it is charged to.
    """
    RECEIVED.append({"tool": "file_expense", "chat": ctx.chat_id, "expense": expense})
    return Filed(expense_id=f"exp-{expense.spent_on.isoformat()}", category=category)


@agent.tool(needs_approval=over_100_eur, allow_edits=True)
async def reimburse(amount: Annotated[float, Field(gt=0)], currency: Currency) -> Receipt:
    """Pay an expense back to the employee.

    Parameters
    ----------
    amount
        How much to pay back.
    currency
        The currency it is paid in.
    """
    RECEIVED.append({"tool": "reimburse", "amount": amount, "currency": currency})
    return Receipt(expense_id="exp-1", total=amount)


@agent.tool(name="refuse")
def refuse_expense(reason: str) -> dict[str, str]:
    """Refuse an expense.

    :param reason: Why it is refused, shown to the employee.
    """
    raise ToolError(f"refused: {reason}")


class Choice(BaseModel):
    choice: str


@agent.client_tool(render="choice")
def choose_category(question: str, options: Annotated[list[str], Field(min_length=2)]) -> Choice:
    """Ask the employee to choose a category."""
