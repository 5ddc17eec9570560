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
//       {"type": "forge", "part": {...a tool UI part...}}  // appended to the last
//     ],                                                    // assistant message, then sent
//     "timeoutMs": 20000,
//     "maxPosts": 8
//   }
//
// Output: one JSON object on stdout (see `report` at the bottom). The script exits 0
// whenever it could run the scenario; what went wrong is in the report, for the test to
// judge. It exits 2 only when the scenario itself cannot be read or the package cannot
// be loaded.

import { readFileSync } from 'node:fs';

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
const toolCalls = [];
const finishes = [];

// -- fetch: count POSTs, keep their bodies and the raw responses ---------------------

const requests = [];
let inflight = 0;
const realFetch = globalThis.fetch;

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
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
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

class Chat extends ai.AbstractChat {
  constructor(init) {
    super({ ...init, state: new State() });
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

const answers = scenario.toolOutputs ?? {};
let chat;
chat = new Chat({
  id: scenario.chatId,
  transport,
  sendAutomaticallyWhen,
  onError: (error) => {
    errors.push(String(error?.message ?? error));
  },
  onFinish: ({ finishReason, isError, isAbort }) => {
    finishes.push({ finishReason: finishReason ?? null, isError: !!isError, isAbort: !!isAbort });
  },
  onToolCall: ({ toolCall }) => {
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
  problems,
  timedOut,
  messages: chat.messages,
  toolCalls,
  finishes,
  posts: requests.filter((r) => r.method === 'POST').length,
  requests,
};
process.stdout.write(`${JSON.stringify(report)}\n`);
process.exit(0);
