// Parkway playground: the reference chat page. Plain JavaScript, no build step, no
// framework, nothing loaded from elsewhere (the page's CSP allows only its own origin).
//
// It talks to the server exactly like an AI SDK `useChat` front end with
// `DefaultChatTransport`: POST /api/chat with the whole history, the SSE UI message
// stream read with fetch + ReadableStream, client-tool answers and approval responses
// put into the assistant message's tool parts and POSTed again once every pending
// call of the last step has an answer (`sendAutomaticallyWhen`). On top of that it
// renders a widget for each parked call, rebuilds a chat from GET /api/chats/{id} on
// reload, and polls call status so another tab's (or the server's) answer shows up.
//
// This module is the page's entry point: it wires the parts together and boots. The
// ES modules it pulls in, one concern each:
//   playground-base.js   shared helpers (DOM builder, ids, canonical JSON) and the API client
//   host-token.js        the host application's token, for an embedded page (postMessage)
//   canonical.js         RFC 8785 canonical JSON and the parkedCallKey, as the server has them
//   ui-stream.js         tool-part helpers; reading an SSE body into chunks; the UI message
//                        reducer (chunks -> message parts)
//   chat.js              the chat controller: send, continue, sync, follow, polling, answers
//   call-outcome.js      a call's outcome (the stored one wins) and the chip it gives
//   composer.js          sending, the confirm step before ending waiting requests, suggestions
//   widgets.js           the widget registry: one widget per parked call, chosen by kind
//   widget.js            the widget base class (state, chip, redraw, shared cards, settle)
//   approval-widgets.js  approval and agent-change widgets
//   code-widgets.js      code review (execute_code) and library change (save_function) widgets
//   code-view.js         code with line numbers, code results, artifact references and downloads
//   client-widgets.js    choice, generic client-tool and unsupported widgets
//   connect-widget.js    the connect card; connect-flow.js its OAuth popup and polling
//   mcp-widgets.js       an MCP server's request for input (forms, links); mcp-form.js
//                        the form built from an elicitation schema, and its checks
//   live-question.js     a question a running call waits for (an older MCP server's form
//                        during a call), answered within its wait
//   view.js              rendering messages, tool calls and widget cards; the status pill;
//                        the Decisions list (the chat's audit trail)
//   message-extras.js    reasoning, tool calls still being written, the model/usage footer
//   agent-panel.js       the agent panel: working template, build kit, commit
//   agent-panel-lists.js the panel's lists: what the kit adds, recent revisions
//   code-panel.js        the panel's Code section: the sandbox's status, the function library
//   commit-diff.js       an agent change's patch and line diff
//   approvals-view.js    the Approvals view: approvals left to this principal, across chats
//   queued-call.js       one approval opened there, hosting its card and settling it
// and the classic script overlay.js (the build-kit merge).

import { AgentPanel } from "./agent-panel.js";
import { ApprovalsView } from "./approvals-view.js";
import { Chat } from "./chat.js";
import { Composer } from "./composer.js";
import { HostToken } from "./host-token.js";
import { Api, authMode } from "./playground-base.js";
import { DecisionsList, View } from "./view.js";

const CHAT_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

/** Build the page's parts (one of each, passed to whoever needs them: nothing global)
 *  and start them. */
function boot() {
  const api = new Api(HostToken.forPage(), authMode());
  const panel = new AgentPanel(api, document.getElementById("agent-panel"));
  const chat = new Chat({ api, panel });
  const view = new View(document, chat);
  chat.view = view;
  api.onSignedOut = (text) => view.banner(text);
  api.start();
  chat.decisions = new DecisionsList(api, document);
  panel.start();
  const composer = new Composer(document, chat);
  composer.start();
  panel.ready.then(() => composer.suggest(panel.head && panel.head.suggestions));
  view.status("ready");
  view.els.stop.addEventListener("click", () => chat.stop());
  view.els["banner-close"].addEventListener("click", () => view.banner(null));
  view.els["new-chat"].addEventListener("click", () => {
    window.location.assign(window.location.pathname);
  });
  // Narrow screens show the chat or the agent panel, one at a time.
  const app = document.getElementById("app");
  const toggle = document.getElementById("toggle-agent");
  toggle.addEventListener("click", () => {
    const agent = app.dataset.pane !== "agent";
    app.dataset.pane = agent ? "agent" : "chat";
    toggle.setAttribute("aria-expanded", String(agent));
    toggle.textContent = agent ? "Chat" : "Agent";
  });
  const requested = new URLSearchParams(window.location.search).get("chat");
  if (requested && CHAT_ID.test(requested)) {
    chat.adopt(requested);
    chat.sync();
  } else if (requested) {
    view.banner("The chat id in the address is not valid.");
  }
  chat.startPolling();
  new ApprovalsView(document, { api, panel }).start();
}

boot();
