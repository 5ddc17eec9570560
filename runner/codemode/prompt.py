"""What the model reads about ``execute_code``.

This text decides whether a model uses the tool well, so it is reviewed like code: it
says when to reach for the tool (and when not), what the program can use, how data goes
in and out, and the limits, in the order a model needs them. docs/code-mode.md explains
each promise; tests/runner/test_code_mode.py checks that the names it mentions exist.
"""

from __future__ import annotations

__all__ = ["DESCRIPTION"]

DESCRIPTION = """\
Run a short Python 3 program in a sandbox, after the user reviews it (they may approve, \
edit or deny it; if they edit it, the edited program is what runs). Use it to work on \
data you already have: filter, search, count, join, reshape or summarise a large tool \
result or file, or combine several of this agent's tools without a round trip per call. \
Do not use it for things you can answer directly, and do not use it to reach the \
internet: there is no network.

Input: `code` (the program), optional `args` (JSON, read as the variable `args`), \
optional `inputs` (artifact ids to read: a list, or an object name -> id; a large tool \
result reaches you as {artifact_id, bytes, preview}, and its id is what you pass here), \
optional `limits` ({timeout_s, cpu_s, memory_mb}: you may only lower them).

Inside the program, already defined:
- `args`: the JSON you passed.
- `result(value)`: hands `value` (plain JSON) back to you as `result` (so do not name a \
variable `result`). Without it, the value of the program's last line, if that line is \
an expression, is the result.
- `artifacts.text(name)`, `artifacts.json(name)`, `artifacts.get(name)` (bytes), \
`artifacts.names()`: the inputs, by id or by the name you gave them.
- `tools.call(name, input)`: calls one of this agent's server tools that needs no \
approval and returns its output; other tools are refused.
- `pw`, a helper module: `pw.grep(pattern, text, context=0, ignore_case=False)` (matches \
with line numbers), `pw.query(data, "items[?status == 'open'].id")` (a small \
JMESPath-like query: dotted keys, [n], [*], [?key == value] filters), text helpers \
`pw.split_lines`, `pw.chunk`, `pw.truncate`, `pw.word_count`, `pw.diff(a, b)`, and CSV \
helpers `pw.read_csv(text)` (rows as dicts), `pw.filter_rows`, `pw.select`, \
`pw.aggregate(rows, by, field, op)` (count, sum, min, max, mean), `pw.write_csv(rows)`.
- `from library import <name>`: functions this agent saved (list_functions shows them).
Only the Python standard library is installed.

Output: {status, stdout, stderr, result, wall_ms}; status is ok, error (the program \
raised, MemoryError included: the traceback is in stderr), timeout, output_limit, \
killed (the CPU limit or a crash) or unavailable (the server cannot run code; `message` \
says why). Print little: \
return what you need with result(...). Long stdout is cut; the whole of it becomes an \
artifact (`stdout_artifact`).

Limits: 10 s wall clock by default (the agent may allow up to 60 s), 512 MiB memory, \
16 processes, 64 MiB of scratch files in the working folder, 1 MiB of stdout inline. \
Nothing persists between runs: save a reusable function with save_function.\
"""
