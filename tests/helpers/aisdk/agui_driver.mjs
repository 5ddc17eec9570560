// Drives a running AG-UI endpoint (Parkway's POST /api/agui) with the real
// `@ag-ui/client` package, the way a front end would: one HttpAgent for the thread,
// user messages added with addMessage, frontend tools answered with tool messages,
// interrupts answered with `resume` (built by the package's buildResumeArray), and
// every turn sent with runAgent.
//
// Input: one JSON scenario, as the first argument or on stdin:
//   {
//     "url": "http://127.0.0.1:8123/api/agui",
//     "headers": {"authorization": "Bearer <token>"},   // sent with every POST
//     "threadId": "t-1",               // optional: HttpAgent makes up a uuid
//     "state": {                       // optional: restore an agent from an earlier
//       "messages": [...],             // invocation's report (its `messages`,
//       "pendingInterrupts": [...],    // `pendingInterrupts` and `state`); absent = a
//       "state": {...}                 // fresh agent, like a page reload that lost
//     },                               // everything
//     "tools": [                       // frontend tools, RunAgentParameters.tools of
//       {"name": "pick_color", "description": "...", "parameters": {...JSON Schema}}
//     ],                               // every run
//     "frontend": {                    // how answerTools answers a pending frontend
//       "pick_color": {"result": {"color": "red"}},   // tool call, by tool name:
//       "other": {"error": "no"}       // content JSON.stringify(result); or `error`
//     },                               // set and content the error text (an entry
//                                      // may give `content` to send instead)
//     "actions": [
//       {"type": "say", "text": "hello", "id": "u-1"},  // addMessage({id (default a
//                                      // random uuid), role "user", content text}),
//                                      // then runAgent({tools})
//       {"type": "run"},               // runAgent({tools}), no new input
//       {"type": "answerTools"},       // for each pendingToolCallIds entry of the
//                                      // PREVIOUS run's success outcome: addMessage
//                                      // ({id: random uuid, role "tool", toolCallId,
//                                      // content[, error]}) answered from `frontend`
//                                      // by the tool name found in agent.messages;
//                                      // then runAgent({tools})
//       {"type": "resume", "responses": {"<interruptId>":
//           {"status": "resolved", "payload": {...}} | {"status": "cancelled"}}},
//                                      // resume = buildResumeArray(
//                                      //   agent.pendingInterrupts, responses);
//                                      // runAgent({tools, resume})
//       {"type": "resumeRaw", "resume": [ResumeEntry, ...]},
//                                      // runAgent({tools, resume: exactly this})
//       {"type": "sayAndResume", "text": "...", "id": "u-2", "responses": {...}}
//                                      // both in one run (the resume array is built
//                                      // first: if that throws, nothing is added)
//     ],
//     "timeoutMs": 20000               // for the whole scenario; a run still going
//   }                                  // at the deadline is aborted (timedOut)
//
// Output: one JSON object on stdout, nothing else (console.log/info/debug/warn of the
// package go to stderr; warn is also kept in the run's `warnings`):
//   {
//     "threadId": "t-1",
//     "runs": [                        // one per action, in order
//       {
//         "action": {...},             // the action, as given
//         "input": {"threadId", "runId", "hadResume": bool} | null,
//                                      // null when the driver never called runAgent
//                                      // (buildResumeArray threw: see `error`; or an
//                                      // unknown action: see `problems`)
//         "request": {...} | null,     // the RunAgentInput the client POSTed, parsed;
//                                      // null when it sent nothing
//         "sent": bool,                // whether the client made the POST at all
//         "httpStatus": null | number, // the response's status (200 too)
//         "httpBody": null | any,      // an HTTP error's body (parsed when JSON)
//         "contentType": null | "...", // the response's content-type
//         "events": [...],             // every SSE frame of the response, exactly as
//                                      // received on the wire (parsed JSON; a frame
//                                      // that is not JSON is {"__unparsed": "<data>"}),
//                                      // read from a copy of the body, so it holds
//                                      // what the client refused too. Framed per the
//                                      // SSE spec (CRLF, LF or CR line ends), unlike
//                                      // the client, which splits on "\n\n" only and
//                                      // fails on a CRLF-framed stream. When reading
//                                      // that copy failed, the run also has
//                                      // "wireError": "..." (e.g. on an abort)
//         "clientEvents": [...],       // what the client handed its subscribers
//                                      // (onEvent): after its compatibility boundary,
//                                      // its enforcement (unknown material stripped,
//                                      // unknown event types dropped) and its chunk
//                                      // expansion; stops where the client gave up
//         "outcome": "success" | "interrupt" | "cancelled" | null,
//                                      // onRunFinishedEvent's; null: no RUN_FINISHED
//                                      // reached the subscribers. The client resolves
//                                      // a stream that ends without RUN_FINISHED (even
//                                      // an empty one) with no error: only this says so
//         "interrupts": [...],         // the interrupt outcome's interrupts
//         "pendingToolCallIds": [...], // the success outcome's (the producer's list,
//                                      // or derived by the client from the stream)
//         "result": any | null,        // the success outcome's result
//         "runErrors": [...],          // RUN_ERROR events (onRunErrorEvent); the
//                                      // client makes one up, code "abort", on abort
//         "error": null | "...",       // "<class>: <message>" (String(err), with the
//                                      // class named) of what runAgent rejected with
//                                      // (an HTTP error, the client's own checks of
//                                      // the stream or of pending interrupts, a zod
//                                      // error on a malformed event), or of what
//                                      // buildResumeArray threw
//         "warnings": ["..."],         // console.warn of the package during the run
//                                      // (e.g. "[ag-ui][enforce] Removed unrecognised
//                                      // material at ...")
//         "timedOut": bool
//       }
//     ],
//     "messages": [...],               // agent.messages at the end
//     "pendingInterrupts": [...],      // agent.pendingInterrupts at the end
//     "state": {...},                  // agent.state at the end
//     "schemaErrors": [                // wire events that @ag-ui/core's EventSchema
//       {"run": 0, "event": 3, "type": "RUN_FINISHED", "message": "<path>: <zod msg>"}
//     ],                               // rejects (the run and event indexes; type
//                                      // null and message "not JSON" for a frame that
//                                      // is not JSON). The schemas accept unknown
//                                      // properties: the client strips those, with a
//                                      // warning in the run's `warnings`
//     "problems": ["..."],             // scenario-level trouble: a pending tool call
//                                      // `frontend` does not answer, answerTools with
//                                      // nothing pending, an unknown action type
//     "timedOut": bool                 // the deadline passed; later actions not run
//   }
//
// The script exits 0 whenever it could run the scenario; what went wrong is in the
// report, for the test to judge. It exits 2 only when the scenario itself cannot be
// read or the package cannot be loaded.

import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';

function readScenario() {
  const raw = process.argv[2] ?? readFileSync(0, 'utf8');
  return JSON.parse(raw);
}

function fail(message) {
  process.stderr.write(`agui_driver: ${message}\n`);
  process.exit(2);
}

let scenario;
try {
  scenario = readScenario();
  if (typeof scenario?.url !== 'string') throw new Error('no "url"');
} catch (err) {
  fail(`cannot read the scenario: ${err.message}`);
}

// -- stdout is the report's alone -------------------------------------------------------

let currentRun = null;
const toStderr =
  (keep) =>
  (...args) => {
    const line = args
      .map((a) => (typeof a === 'string' ? a : a instanceof Error ? a.stack : safeJson(a)))
      .join(' ');
    if (keep && currentRun !== null) currentRun.warnings.push(line);
    process.stderr.write(`${line}\n`);
  };
function safeJson(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}
console.log = toStderr(false);
console.info = toStderr(false);
console.debug = toStderr(false);
console.warn = toStderr(true);

let client;
let schemas;
try {
  client = await import('@ag-ui/client');
  schemas = await import('@ag-ui/core/schemas');
} catch (err) {
  fail(`cannot load @ag-ui/client: ${err.message}`);
}
const { HttpAgent, buildResumeArray } = client;
const { EventSchema } = schemas;

const timeoutMs = scenario.timeoutMs ?? 20000;
const deadline = Date.now() + timeoutMs;
const tools = scenario.tools ?? [];
const frontend = scenario.frontend ?? {};
const problems = [];
const schemaErrors = [];
const runs = [];
let timedOut = false;

// -- the wire: what the server sent, independent of what the client made of it --------

// SSE framing per the HTML spec, not the client's (which splits on "\n\n" only): lines
// end in CRLF, LF or CR; a blank line ends an event; its `data:` lines (one optional
// space after the colon) are joined with "\n". What is left at the end of the body
// counts as a last event, as the client counts it.
async function readWire(response, record) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  let data = [];
  const dispatch = () => {
    if (data.length === 0) return;
    const text = data.join('\n');
    data = [];
    let event;
    try {
      event = JSON.parse(text);
    } catch {
      event = { __unparsed: text };
    }
    record.events.push(event);
  };
  const line = (text) => {
    if (text === '') dispatch();
    else if (text === 'data' || text.startsWith('data:')) data.push(text.slice(5).replace(/^ /, ''));
  };
  const lines = (final) => {
    let end;
    while ((end = /\r\n|\n|\r/.exec(buffered)) !== null) {
      // A CR at the end of what has arrived may be the first half of a CRLF.
      if (!final && end[0] === '\r' && end.index === buffered.length - 1) break;
      line(buffered.slice(0, end.index));
      buffered = buffered.slice(end.index + end[0].length);
    }
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      lines(false);
    }
    buffered += decoder.decode();
    lines(true);
    if (buffered !== '') line(buffered);
    dispatch();
  } catch (err) {
    record.wireError = String(err);
  }
}

// The package's fetch, wrapped to see the request and a copy of the response.
const agentFetch = async (url, init) => {
  const record = currentRun;
  if (record !== null) {
    record.sent = true;
    try {
      record.request = JSON.parse(init.body);
    } catch {
      record.request = init.body ?? null;
    }
  }
  const response = await fetch(url, init);
  if (record !== null) {
    record.httpStatus = response.status;
    record.contentType = response.headers.get('content-type');
    if (response.ok && response.body !== null) {
      record.wire = readWire(response.clone(), record);
    }
  }
  return response;
};

// -- the agent ---------------------------------------------------------------------------

const restored = scenario.state;
const agent = new HttpAgent({
  url: scenario.url,
  headers: scenario.headers ?? {},
  fetch: agentFetch,
  ...(scenario.threadId === undefined ? {} : { threadId: scenario.threadId }),
  ...(restored?.messages === undefined ? {} : { initialMessages: restored.messages }),
  ...(restored?.state === undefined ? {} : { initialState: restored.state }),
});
if (restored?.pendingInterrupts !== undefined) {
  agent.pendingInterrupts = structuredClone(restored.pendingInterrupts);
}

function newRecord(action) {
  return {
    action,
    input: null,
    request: null,
    sent: false,
    httpStatus: null,
    httpBody: null,
    contentType: null,
    events: [],
    clientEvents: [],
    outcome: null,
    interrupts: [],
    pendingToolCallIds: [],
    result: null,
    runErrors: [],
    error: null,
    warnings: [],
    timedOut: false,
  };
}

async function runOnce(record, resume) {
  const runId = randomUUID();
  record.input = { threadId: agent.threadId, runId, hadResume: resume !== undefined };
  const abortController = new AbortController();
  const timer = setTimeout(
    () => {
      record.timedOut = true;
      timedOut = true;
      abortController.abort();
    },
    Math.max(0, deadline - Date.now()),
  );
  const subscriber = {
    onEvent: ({ event }) => {
      record.clientEvents.push(plain(event));
    },
    onRunFinishedEvent: (params) => {
      record.outcome = params.outcome;
      if (params.outcome === 'interrupt') record.interrupts = structuredClone(params.interrupts);
      if (params.outcome === 'success') {
        record.pendingToolCallIds = [...(params.pendingToolCallIds ?? [])];
        record.result = params.result === undefined ? null : structuredClone(params.result);
      }
    },
    onRunErrorEvent: ({ event }) => {
      record.runErrors.push(plain(event));
    },
  };
  try {
    await agent.runAgent(
      { runId, tools, abortController, ...(resume === undefined ? {} : { resume }) },
      subscriber,
    );
  } catch (err) {
    record.error = describe(err);
    if (typeof err?.status === 'number') {
      record.httpStatus = err.status;
      record.httpBody = err.payload ?? null;
    }
  } finally {
    // The copy of the body is read to its end (or to the deadline's abort).
    if (record.wire !== undefined) await record.wire;
    delete record.wire;
    clearTimeout(timer);
  }
}

// A copy of an event fit for JSON: the RUN_ERROR the client makes up on an abort carries
// the DOMException as its rawEvent.
function plain(event) {
  if (!(event.rawEvent instanceof Error)) return structuredClone(event);
  return structuredClone({ ...event, rawEvent: String(event.rawEvent) });
}

// String(err), but naming the error's class: the package's AGUIError and zod's ZodError
// would otherwise read "Error: ..." and a bare JSON list of issues.
function describe(err) {
  if (!(err instanceof Error)) return String(err);
  const name = err.name === 'Error' ? (err.constructor?.name ?? 'Error') : err.name;
  return `${name || 'Error'}: ${err.message}`;
}

function userMessage(action) {
  return { id: action.id ?? randomUUID(), role: 'user', content: action.text };
}

function toolNameOf(toolCallId) {
  for (const message of agent.messages) {
    for (const call of message.toolCalls ?? []) {
      if (call.id === toolCallId) return call.function?.name;
    }
  }
  return undefined;
}

function answers(index, previous) {
  const pending = previous?.outcome === 'success' ? previous.pendingToolCallIds : [];
  if (pending.length === 0) {
    problems.push(`action ${index} (answerTools): the previous run left no pending tool calls`);
  }
  const messages = [];
  for (const toolCallId of pending) {
    const name = toolNameOf(toolCallId);
    const entry = name === undefined ? undefined : frontend[name];
    if (entry === undefined) {
      problems.push(
        `action ${index} (answerTools): no frontend answer for tool call ${toolCallId} (tool ${JSON.stringify(name ?? null)})`,
      );
      continue;
    }
    const message = { id: randomUUID(), role: 'tool', toolCallId };
    if (entry.error !== undefined) {
      message.content = entry.content ?? String(entry.error);
      message.error = String(entry.error);
    } else {
      message.content = entry.content ?? JSON.stringify(entry.result ?? null);
    }
    messages.push(message);
  }
  return messages;
}

async function perform(action, index, record, previous) {
  switch (action.type) {
    case 'say':
      agent.addMessage(userMessage(action));
      return runOnce(record, undefined);
    case 'run':
      return runOnce(record, undefined);
    case 'answerTools':
      for (const message of answers(index, previous)) agent.addMessage(message);
      return runOnce(record, undefined);
    case 'resume':
    case 'sayAndResume': {
      let resume;
      try {
        resume = buildResumeArray(agent.pendingInterrupts, action.responses ?? {});
      } catch (err) {
        record.error = describe(err);
        return undefined;
      }
      if (action.type === 'sayAndResume') agent.addMessage(userMessage(action));
      return runOnce(record, resume);
    }
    case 'resumeRaw':
      return runOnce(record, action.resume);
    default:
      problems.push(`action ${index}: unknown type ${JSON.stringify(action.type)}`);
      return undefined;
  }
}

function zodMessage(error) {
  return error.issues
    .map((issue) => `${issue.path.length > 0 ? issue.path.join('.') : '(event)'}: ${issue.message}`)
    .join('; ');
}

const actions = scenario.actions ?? [];
for (const [index, action] of actions.entries()) {
  if (timedOut || Date.now() >= deadline) {
    timedOut = true;
    break;
  }
  const previous = runs[runs.length - 1];
  const record = newRecord(action);
  currentRun = record;
  runs.push(record);
  try {
    await perform(action, index, record, previous);
  } catch (err) {
    problems.push(`action ${index} (${action.type}): the driver threw: ${err?.stack ?? err}`);
  }
  currentRun = null;
  for (const [eventIndex, event] of record.events.entries()) {
    if (event !== null && typeof event === 'object' && '__unparsed' in event) {
      schemaErrors.push({ run: index, event: eventIndex, type: null, message: 'not JSON' });
      continue;
    }
    const parsed = EventSchema.safeParse(event);
    if (!parsed.success) {
      schemaErrors.push({
        run: index,
        event: eventIndex,
        type: event?.type ?? null,
        message: zodMessage(parsed.error),
      });
    }
  }
}

const report = {
  threadId: agent.threadId,
  runs,
  messages: agent.messages,
  pendingInterrupts: agent.pendingInterrupts,
  state: agent.state,
  schemaErrors,
  problems,
  timedOut,
};
process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(0));
