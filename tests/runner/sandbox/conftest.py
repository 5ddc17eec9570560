"""The fixtures of the sandbox tests: one confined provider per module, and a check
that a test leaves no process of the sandbox uid behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parkway.runner.sandbox import BwrapProvider
from tests.helpers.sandbox_rig import confined_provider, no_leftovers


@pytest.fixture(scope="module")
def provider() -> BwrapProvider:
    return confined_provider()


@pytest.fixture
def leftovers() -> Iterator[None]:
    """The test leaves no process of the sandbox uid behind."""
    with no_leftovers():
        yield
