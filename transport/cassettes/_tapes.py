"""A cassette's model steps between a replay and the server it starts (private to
:mod:`parkway.transport.cassettes`).

The replay writes a *tape folder*: ``tape.json`` holds the cassette's recorded model
steps, the tape mode (``replay``, ``new`` or ``all``, :mod:`parkway.runner.llm.tape`) and
the replay's chat ids mapped to the recorded ones. The server it starts is given the
folder (``PARKWAY_MODEL_TAPE``) and serves its provider models through the tape. What the
tape does (a step served, recorded, or whose request differs, or missing) is appended to
``reports.jsonl``, one JSON object a line, each in a single ``write`` to a file opened for
appending: the line survives the server being killed right after, and a server started
after a kill (a cold replay) takes over the steps the killed one recorded. After the
run, the replay reads the reports back (:func:`read_outcome`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parkway.runner.errors import ParkwayError
from parkway.runner.llm import ModelTape, TapeMode, TapeStep
from parkway.transport.cassettes._format import Cassette, ModelStepRecord

__all__ = [
    "RECORD_MODES",
    "ModelFinding",
    "TapeOutcome",
    "load_tape",
    "read_outcome",
    "tape_mode",
    "with_model_steps",
    "write_tape_folder",
]

# VCR.py's record modes, and what each does to a cassette's model steps in a replay:
# never call the model (once: the cassette exists, or there is nothing to replay), call it
# for the steps whose request changed or that are new, call it for every step.
RECORD_MODES = ("once", "new_episodes", "none", "all")
_TAPE_MODES: dict[str, TapeMode] = {
    "once": "replay",
    "none": "replay",
    "new_episodes": "new",
    "all": "all",
}


def tape_mode(record_mode: str) -> TapeMode:
    """The tape mode of a replay in ``record_mode``; raises ``ValueError`` for another."""
    try:
        return _TAPE_MODES[record_mode]
    except KeyError:
        raise ValueError(
            f"unknown record mode {record_mode!r} (one of {', '.join(RECORD_MODES)})"
        ) from None


_TAPE = "tape.json"
_REPORTS = "reports.jsonl"


def write_tape_folder(
    folder: Path, cassette: Cassette, mode: TapeMode, chats: Mapping[str, str]
) -> None:
    """Prepare ``folder`` for a server that serves ``cassette``'s model steps. ``chats``
    maps the chat ids the replay sends to the recorded ones."""
    folder.mkdir(parents=True, exist_ok=True)
    document = {
        "mode": mode,
        "chats": dict(chats),
        "steps": [step.model_dump() for step in cassette.model_steps],
    }
    (folder / _TAPE).write_text(json.dumps(document), encoding="utf-8")
    (folder / _REPORTS).write_bytes(b"")


def with_model_steps(tape: ModelTape) -> Callable[[Cassette], Cassette]:
    """For a recording server: a cassette with the model steps ``tape`` has recorded so
    far, in the order they were made."""

    def finish(cassette: Cassette) -> Cassette:
        steps = [ModelStepRecord.of(step) for step in list(tape.steps.values())]
        return cassette.model_copy(update={"model_steps": steps})

    return finish


def _reports(folder: Path) -> list[dict[str, Any]]:
    try:
        lines = (folder / _REPORTS).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill: the step it named was not finished
    return out


def load_tape(folder: str | Path) -> ModelTape:
    """The tape in ``folder``, for the server: the cassette's steps, then those a server
    before this one recorded; reports go to the folder. Raises :class:`ParkwayError`
    naming the problem when the folder is not a tape folder."""
    where = Path(folder)
    try:
        document = json.loads((where / _TAPE).read_text(encoding="utf-8"))
        steps = {(s["chat"], s["index"]): TapeStep.from_json(s) for s in document["steps"]}
        mode, chats = document["mode"], document["chats"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ParkwayError(f"model tape {str(where)!r} cannot be read: {exc}") from None
    for report in _reports(where):
        if report.get("event") == "recorded":
            step = TapeStep.from_json(report["step"])
            steps[(step.chat, step.index)] = step
    path = where / _REPORTS

    def sink(report: dict[str, Any]) -> None:
        line = (json.dumps(report, separators=(",", ":")) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    try:
        return ModelTape(steps.values(), mode, chats=chats, sink=sink)
    except ValueError as exc:
        raise ParkwayError(f"model tape {str(where)!r}: {exc}") from None


@dataclass(frozen=True)
class ModelFinding:
    """A model step whose request differs from the recorded one (``fields``: up to five
    (path, recorded, now) triples), or that the cassette does not have (``missing``)."""

    chat: str
    index: int
    fields: tuple[tuple[str, Any, Any], ...] = ()
    missing: bool = False

    def __str__(self) -> str:
        head = f"model step {self.index} of chat {self.chat!r}"
        if self.missing:
            return (
                f"{head}: the cassette has no recorded answer for it (the agent now asks "
                "the model more than when it was recorded)"
            )
        path, expected, got = self.fields[0]
        lines = [f"{head}: the request to the model differs at {path}"]
        lines.append(f"  expected: {_short(expected)}")
        lines.append(f"  got:      {_short(got)}")
        more = [f[0] for f in self.fields[1:]]
        if more:
            lines.append("  and at " + ", ".join(more))
        lines.append("  (the recorded answer was served all the same)")
        return "\n".join(lines)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 300 else text[:299] + "…"


@dataclass
class TapeOutcome:
    """What the tape did in one replay: the steps of the run in order (served or
    recorded), which of them were recorded anew, and the findings."""

    steps: dict[tuple[str, int], TapeStep] = field(default_factory=dict)
    recorded: list[tuple[str, int]] = field(default_factory=list)
    findings: list[ModelFinding] = field(default_factory=list)

    def model_steps(self) -> list[ModelStepRecord]:
        return [ModelStepRecord.of(step) for step in self.steps.values()]


def read_outcome(folder: Path, cassette: Cassette) -> TapeOutcome:
    """The reports of the servers that used ``folder``, for ``cassette``."""
    recorded = {(s.chat, s.index): s.step() for s in cassette.model_steps}
    outcome = TapeOutcome()
    seen: set[tuple[str, int, str]] = set()
    for report in _reports(folder):
        key = (str(report.get("chat")), int(report.get("index", -1)))
        event = report.get("event")
        if event == "recorded":
            outcome.steps[key] = TapeStep.from_json(report["step"])
            if key not in outcome.recorded:
                outcome.recorded.append(key)
        elif event == "used" and key in recorded:
            outcome.steps.setdefault(key, recorded[key])
        elif event in {"differs", "missing"} and (*key, event) not in seen:
            # A step is asked for again after a restart: report it once.
            seen.add((*key, event))
            fields = tuple(tuple(f) for f in report.get("fields", ()))
            outcome.findings.append(ModelFinding(*key, fields=fields, missing=event == "missing"))
    return outcome
