// Drives a running Parkway server with the real `ai` client package, the way a
// framework-free front end would: AbstractChat + DefaultChatTransport, client tools
// answered in onToolCall, approvals answered with addToolApprovalResponse, and
// sendAutomaticallyWhen doing the resends.
//
// Input: one JSON scenario, as the first argument or on stdin:
//   {
//     "baseUrl": "http://127.0.0.1:8123",
//     "token": "<bearer token>",
//     "chatId": "chat-1",
//     "ai": "ai7",                      // which pinned major to load: ai5 | ai6 | ai7
//     "toolOutputs": {                  // how onToolCall answers each client tool
//       "pick": {"output": {"choice": "x"}},
//       "confirm": {"errorText": "no"}  // answers with state output-error
//     },
//     "actions": [
//       {"type": "send", "text": "hello"},
//       {"type": "approve", "tool": "publish", "approved": true, "reason": "ok"},
//       {"type": "forge", "part": {...a tool UI part...}}, // appended to the last
//                                                          // assistant message, then sent
//       {"type": "resume", "signalWhenStreaming": "/tmp/x"}, // chat.resumeStream(); the
//                                    // optional file is written once the resumed stream
//                                    // has updated the chat (status streaming)
//       {"type": "regenerate"},        // chat.regenerate(): the last turn again
//       {"type": "note"},              // record the chat's status, error and messages
//                                    // now (the report's `notes`)
//       {"type": "signal", "file": "/tmp/y"},  // write a file (a handshake with the test)
//       {"type": "await", "file": "/tmp/z"}    // wait until the test writes this file
//     ],
//     "drop": {"post": 2, "after": "text-delta"},  // optional: a network drop. The body
//                                    // of the 2nd POST's response errors with a fetch
//                                    // TypeError right after its first `text-delta`
//                                    // chunk was delivered; the connection is closed.
//     "loadMessages": true,          // optional: start like a page reload, with the
//                                    // messages of GET /api/chats/{chatId}
//     "timeoutMs": 20000,
//     "maxPosts": 8
//   }
//
// Output: one JSON object on stdout (see `report` at the bottom). The script exits 0
// whenever it could run the scenario; what went wrong is in the report, for the test to
// judge. It exits 2 only when the scenario itself cannot be read or the package cannot
// be loaded.

import { existsSync, readFileSync, writeFileSync } from 'node:fs';

function readScenario() {
  const raw = process.argv[2] ?? readFileSync(0, 'utf8');
  return JSON.parse(raw);
}

function fail(message) {
  process.stderr.write(`driver: ${message}\n`);
  process.exit(2);
}

let scenario;
try {
  scenario = readScenario();
} catch (err) {
  fail(`cannot read the scenario: ${err.message}`);
}

const MAJORS = new Set(['ai5', 'ai6', 'ai7']);
if (!MAJORS.has(scenario.ai)) fail(`unknown ai major ${JSON.stringify(scenario.ai)}`);

let ai;
try {
  ai = await import(scenario.ai);
} catch (err) {
  fail(`cannot load ${scenario.ai}: ${err.message}`);
}

const timeoutMs = scenario.timeoutMs ?? 20000;
const maxPosts = scenario.maxPosts ?? 8;
const problems = [];
const errors = [];
const notes = [];
const toolCalls = [];
const finishes = [];

// -- fetch: count POSTs, keep their bodies and the raw responses ---------------------

const requests = [];
const drops = [];
let inflight = 0;
const realFetch = globalThis.fetch;

// A network drop in the middle of a response body, as the browser's fetch reports it:
// the body stream errors with a TypeError ("network error"), which the ai client counts
// as a disconnect (resumable), unlike an abort or a server error. The SSE events up to
// and including the first chunk of type `drop.after` are delivered; the rest is not, and
// the real connection is closed, so the server sees the client go away.
function droppingResponse(response, record, drop) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let buffered = '';
  let delivered = '';
  let done = false;
  const finish = () => {
    if (done) return;
    done = true;
    inflight -= 1;
    record.response = delivered;
  };
  const body = new ReadableStream({
    async pull(controller) {
      let enqueued = false;
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (err) {
          finish();
          controller.error(err);
          return;
        }
        if (chunk.done) {
          // The response ended before the chunk to drop after: no drop happened.
          if (buffered) {
            delivered += buffered;
            controller.enqueue(encoder.encode(buffered));
          }
          finish();
          controller.close();
          return;
        }
        buffered += decoder.decode(chunk.value, { stream: true });
        let end;
        // An SSE event ends with a blank line; sse-starlette writes CRLF line ends.
        while ((end = /\r\n\r\n|\n\n|\r\r/.exec(buffered)) !== null) {
          const event = buffered.slice(0, end.index + end[0].length);
          buffered = buffered.slice(event.length);
          delivered += event;
          controller.enqueue(encoder.encode(event));
          enqueued = true;
          const data = event
            .split(/\r\n|\n|\r/)
            .filter((line) => line.startsWith('data:'))
            .map((line) => line.slice(5).trim())
            .join('\n');
          let type = null;
          try {
            type = JSON.parse(data).type;
          } catch {
            // [DONE] or a comment
          }
          if (type === drop.after) {
            drops.push({ url: record.url, after: type, deliveredChunks: delivered });
            record.dropped = true;
            finish();
            reader.cancel().catch(() => {});
            controller.error(new TypeError('network error'));
            return;
          }
        }
        if (enqueued) return; // the consumer pulls again when it wants more
      }
    },
    cancel(reason) {
      finish();
      return reader.cancel(reason);
    },
  });
  return new Response(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}

globalThis.fetch = async (input, init = {}) => {
  const method = (init.method ?? 'GET').toUpperCase();
  const url = typeof input === 'string' ? input : input.url;
  const record = { method, url, body: null, status: null, response: null };
  if (method === 'POST') {
    if (requests.filter((r) => r.method === 'POST').length >= maxPosts) {
      problems.push(`more than ${maxPosts} POSTs: the client keeps resending`);
      throw new Error(`driver: POST limit of ${maxPosts} reached`);
    }
    try {
      record.body = JSON.parse(init.body);
    } catch {
      record.body = init.body ?? null;
    }
  }
  requests.push(record);
  inflight += 1;
  let response;
  try {
    response = await realFetch(input, init);
  } catch (err) {
    inflight -= 1;
    record.response = `fetch failed: ${err.message}`;
    throw err;
  }
  record.status = response.status;
  record.headers = Object.fromEntries(response.headers.entries());
  const drop = scenario.drop;
  if (
    drop != null &&
    method === 'POST' &&
    response.body != null &&
    requests.filter((r) => r.method === 'POST').length === drop.post
  ) {
    return droppingResponse(response, record, drop);
  }
  // Read a copy of the body so the test sees exactly what the client parsed.
  response
    .clone()
    .text()
    .then(
      (text) => {
        record.response = text;
      },
      (err) => {
        record.response = `body read failed: ${err.message}`;
      },
    )
    .finally(() => {
      inflight -= 1;
    });
  return response;
};

// -- the chat --------------------------------------------------------------------------

class State {
  constructor(messages = []) {
    this.status = 'ready';
    this.error = undefined;
    this.messages = messages;
  }

  pushMessage = (message) => {
    this.messages = this.messages.concat(message);
  };

  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };

  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  };

  snapshot = (thing) => structuredClone(thing);
}

// The chat's messages live in its state (as in the framework bindings' Chat classes).
class Chat extends ai.AbstractChat {
  constructor({ messages, ...init }) {
    super({ ...init, state: new State(messages) });
  }
}

const addOutput = (chat) => (chat.addToolOutput ?? chat.addToolResult).bind(chat);

const withToolCalls = ai.lastAssistantMessageIsCompleteWithToolCalls;
const withApprovals = ai.lastAssistantMessageIsCompleteWithApprovalResponses;
const sendAutomaticallyWhen = withApprovals
  ? (options) => withToolCalls(options) || withApprovals(options)
  : withToolCalls;

const transport = new ai.DefaultChatTransport({
  api: `${scenario.baseUrl}/api/chat`,
  headers: { authorization: `Bearer ${scenario.token}` },
});

// A page reload: the front end shows the chat's history from the server, then resumes.
let initialMessages;
if (scenario.loadMessages) {
  try {
    const loaded = await realFetch(
      `${scenario.baseUrl}/api/chats/${encodeURIComponent(scenario.chatId)}`,
      { headers: { authorization: `Bearer ${scenario.token}` } },
    );
    if (!loaded.ok) throw new Error(`GET /api/chats/{id} answered ${loaded.status}`);
    initialMessages = (await loaded.json()).messages;
  } catch (err) {
    fail(`cannot load the chat's messages: ${err.message}`);
  }
}

const answers = scenario.toolOutputs ?? {};
const toolCallCounts = {};
let chat;
chat = new Chat({
  id: scenario.chatId,
  ...(initialMessages === undefined ? {} : { messages: initialMessages }),
  transport,
  sendAutomaticallyWhen,
  onError: (error) => {
    errors.push(String(error?.message ?? error));
  },
  onFinish: ({ finishReason, isError, isAbort, isDisconnect }) => {
    finishes.push({
      finishReason: finishReason ?? null,
      isError: !!isError,
      isAbort: !!isAbort,
      isDisconnect: !!isDisconnect,
    });
  },
  onToolCall: ({ toolCall }) => {
    toolCallCounts[toolCall.toolCallId] = (toolCallCounts[toolCall.toolCallId] ?? 0) + 1;
    toolCalls.push({
      toolName: toolCall.toolName,
      toolCallId: toolCall.toolCallId,
      input: toolCall.input,
    });
    const answer = answers[toolCall.toolName];
    if (answer === undefined) return; // not a tool this front end answers (yet)
    const call = { tool: toolCall.toolName, toolCallId: toolCall.toolCallId };
    const done =
      'errorText' in answer
        ? addOutput(chat)({ ...call, state: 'output-error', errorText: answer.errorText })
        : addOutput(chat)({ ...call, output: answer.output });
    // Not awaited: the docs say so, and the chat's job queue is busy with this stream.
    Promise.resolve(done).catch((err) => problems.push(`addToolOutput failed: ${err.message}`));
  },
});

// -- waiting for idle ------------------------------------------------------------------

const deadline = Date.now() + timeoutMs;
let timedOut = false;
const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

function busy() {
  return (
    inflight > 0 ||
    chat.status === 'submitted' ||
    chat.status === 'streaming' ||
    chat.activeResponse != null
  );
}

// Idle = no request, no response being read, status ready or error, and it stays so for
// a few event-loop turns (an automatic resend starts within the same turn it is decided).
async function waitIdle() {
  let quiet = 0;
  while (quiet < 5) {
    if (Date.now() > deadline) {
      timedOut = true;
      problems.push(`still busy after ${timeoutMs} ms (status ${chat.status})`);
      return;
    }
    await tick();
    quiet = busy() ? 0 : quiet + 1;
  }
}

function lastAssistant() {
  return [...chat.messages].reverse().find((m) => m.role === 'assistant');
}

async function run(action) {
  switch (action.type) {
    case 'send':
      await chat.sendMessage({ text: action.text });
      break;
    case 'approve': {
      if (typeof chat.addToolApprovalResponse !== 'function') {
        problems.push(`${scenario.ai} has no addToolApprovalResponse`);
        return;
      }
      const part = lastAssistant()?.parts.find(
        (p) => p.type === `tool-${action.tool}` && p.state === 'approval-requested',
      );
      if (part === undefined) {
        problems.push(`no approval-requested part for tool ${action.tool}`);
        return;
      }
      await chat.addToolApprovalResponse({
        id: part.approval.id,
        approved: action.approved,
        ...(action.reason === undefined ? {} : { reason: action.reason }),
      });
      break;
    }
    case 'forge': {
      const message = lastAssistant();
      if (message === undefined) {
        problems.push('no assistant message to forge an answer into');
        return;
      }
      const forged = { ...message, parts: [...message.parts, action.part] };
      chat.messages = chat.messages.map((m) => (m === message ? forged : m));
      await chat.sendMessage();
      break;
    }
    case 'resume': {
      // resumeStream() resolves when the resumed stream has been read to its end.
      let settled = false;
      const resuming = chat.resumeStream().finally(() => {
        settled = true;
      });
      if (action.signalWhenStreaming) {
        while (!settled && chat.status !== 'streaming' && Date.now() <= deadline) await tick();
        writeFileSync(action.signalWhenStreaming, chat.status);
      }
      await resuming;
      break;
    }
    case 'regenerate':
      await chat.regenerate();
      break;
    case 'note':
      notes.push({
        status: chat.status,
        error: chat.error ? String(chat.error.message ?? chat.error) : null,
        messages: structuredClone(chat.messages),
      });
      return;
    case 'signal':
      writeFileSync(action.file, chat.status);
      return;
    case 'await':
      while (!existsSync(action.file)) {
        if (Date.now() > deadline) {
          timedOut = true;
          problems.push(`the test never wrote ${action.file}`);
          return;
        }
        await tick();
      }
      return;
    default:
      problems.push(`unknown action ${JSON.stringify(action.type)}`);
      return;
  }
  await waitIdle();
}

for (const action of scenario.actions ?? []) {
  if (timedOut) break;
  try {
    await run(action);
  } catch (err) {
    problems.push(`action ${action.type} threw: ${err.message}`);
    await waitIdle();
  }
}

const report = {
  ai: scenario.ai,
  status: chat.status,
  error: chat.error ? String(chat.error.message ?? chat.error) : null,
  errors,
  notes,
  problems,
  timedOut,
  messages: chat.messages,
  toolCalls,
  toolCallCounts,
  drops,
  finishes,
  posts: requests.filter((r) => r.method === 'POST').length,
  requests,
};
process.stdout.write(`${JSON.stringify(report)}\n`);
process.exit(0);
