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
//   canonical.js         RFC 8785 canonical JSON and the parkedCallKey, as the server has them
//   ui-stream.js         tool-part helpers; reading an SSE body into chunks; the UI message
//                        reducer (chunks -> message parts)
//   chat.js              the chat controller: send, continue, sync, follow, polling, answers
//   page-context.js      the chat and the view as the widgets reach them (no import cycles)
//   widgets.js           the widget registry: one widget per parked call, chosen by kind
//   widget.js            the widget base class (state, redraw, shared cards, settle)
//   approval-widgets.js  approval and commit_config widgets
//   client-widgets.js    choice, generic client-tool and unsupported widgets
//   connect-widget.js    request_connection: the OAuth popup and its state machine
//   view.js              rendering messages, tool calls and widget cards
//   message-extras.js    reasoning, tool calls still being written, the model/usage footer
//   agent-panel.js       the agent panel: working template, build kit, commit
//   commit-diff.js       commit_config's patch and line diff
// and the classic script overlay.js (the build-kit merge).

import { agentPanel } from "/static/agent-panel.js";
import { chat } from "/static/chat.js";
import { page } from "/static/page-context.js";
import { view } from "/static/view.js";

const CHAT_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

function boot() {
  page.chat = chat;
  page.view = view;
  view.init();
  agentPanel.init(document.getElementById("agent-panel"));
  view.status("ready");
  const composer = view.els.composer;
  const submit = () => {
    const text = composer.value.trim();
    if (!text || chat.busy()) return;
    composer.value = "";
    chat.send(text).then((sent) => {
      if (!sent && !composer.value) composer.value = text;
    });
  };
  view.els["composer-form"].addEventListener("submit", (event) => {
    event.preventDefault();
    submit();
  });
  composer.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  view.els.stop.addEventListener("click", () => chat.stop());
  view.els["banner-close"].addEventListener("click", () => view.banner(null));
  view.els["new-chat"].addEventListener("click", () => {
    window.location.assign(window.location.pathname);
  });
  const requested = new URLSearchParams(window.location.search).get("chat");
  if (requested && CHAT_ID.test(requested)) {
    chat.id = requested;
    view.chatId(requested);
    chat.sync();
  } else if (requested) {
    view.banner("The chat id in the address is not valid.");
  }
  chat.startPolling();
}

boot();
