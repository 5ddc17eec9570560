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
// Modules: playground-base.js (shared helpers and the API client), agent-panel.js (the
// agent panel: working template, build kit, commit), commit-diff.js (commit_config's
// patch and line diff), message-extras.js (reasoning, tool calls still being written,
// the model/usage footer), and the classic script overlay.js (the build-kit merge).
//
// Sections:
//   1. util      constants, tool-part helpers
//   2. api       (in playground-base.js)
//   3. sse       reading a UI message stream body into chunks
//   4. stream    the UI message reducer: chunks -> message parts (StreamRun)
//   5. chat      the controller: send, continue, sync, follow, polling, answers
//   6. widgets   registry + approval, commit, choice, connect, client, unsupported widgets
//   7. view      rendering messages, tool calls and widget cards
//   8. boot

import { agentPanel } from "/static/agent-panel.js";
import { applyPatch, diffView } from "/static/commit-diff.js";
import { messageFooter, reasoningElement, updatePreparing, updateReasoning } from "/static/message-extras.js";
import { API_ORIGIN, api, canonical, errorMessage, h, newId, pretty, sameOrigin } from "/static/playground-base.js";

// -- 1. util ---------------------------------------------------------------------------

const CHAT_ID = /^[A-Za-z0-9_.:-]{1,128}$/;
const PENDING_POLL_MS = 2000;
const CONNECT_POLL_MS = 1000;
const POPUP_CLOSED_GRACE_MS = 3000;
const RESOLVED = new Set(["output-available", "output-error", "output-denied", "approval-responded"]);

function toolNameOf(part) {
  if (part.type === "dynamic-tool") return typeof part.toolName === "string" ? part.toolName : null;
  if (typeof part.type === "string" && part.type.startsWith("tool-")) return part.type.slice(5);
  return null;
}

function isToolPart(part) {
  return toolNameOf(part) !== null;
}

function isResolved(part) {
  return RESOLVED.has(part.state) && !part.preliminary;
}

/** The parts after the last step-start of a message (the AI SDK's "last step"). */
function lastStep(message) {
  let start = -1;
  message.parts.forEach((part, index) => {
    if (part.type === "step-start") start = index;
  });
  return message.parts.slice(start + 1);
}

function callPath(chatId, toolCallId) {
  return `/api/chats/${encodeURIComponent(chatId)}/calls/${encodeURIComponent(toolCallId)}`;
}

// -- 3. sse ----------------------------------------------------------------------------

/** The JSON chunks of an SSE body, as they arrive. Comments, `event:`/`id:` fields and
 *  `[DONE]` are skipped; several `data:` lines of one event are joined with "\n". */
async function* readChunks(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const events = function* (final) {
    // A "\r" at the very end may be the first half of "\r\n": keep it for later.
    let text = buffer;
    let held = "";
    if (!final && text.endsWith("\r")) {
      held = "\r";
      text = text.slice(0, -1);
    }
    text = text.replace(/\r\n?/g, "\n");
    const blocks = text.split("\n\n");
    buffer = (final ? "" : blocks.pop()) + held;
    for (const block of blocks) {
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""));
      if (!data.length) continue;
      const payload = data.join("\n");
      if (payload === "[DONE]") continue;
      yield JSON.parse(payload);
    }
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    yield* events(false);
  }
  buffer += decoder.decode();
  yield* events(true);
}

// -- 4. stream -------------------------------------------------------------------------

/** Applies the chunks of one response to the chat's messages, the way the AI SDK's
 *  `processUIMessageStream` does. `replay`: the response rebuilds its message from the
 *  start (GET .../stream), so `start` clears the parts it already had. */
class StreamRun {
  constructor(chat, { replay }) {
    this.chat = chat;
    this.replay = replay;
    this.message = null;
    this.texts = new Map();
    this.error = null;
    this.finishReason = null;
  }

  ensureMessage(messageId) {
    if (this.message) return this.message;
    const messages = this.chat.messages;
    let message = null;
    if (messageId) message = messages.find((m) => m.role === "assistant" && m.id === messageId);
    if (!message && !messageId && messages.length && messages.at(-1).role === "assistant") {
      message = messages.at(-1);
    }
    if (message && this.replay) message.parts = [];
    if (!message) {
      message = { id: messageId || newId("msg"), role: "assistant", parts: [] };
      messages.push(message);
    }
    this.message = message;
    return message;
  }

  toolPart(toolCallId) {
    const parts = this.ensureMessage().parts;
    for (let i = parts.length - 1; i >= 0; i -= 1) {
      if (isToolPart(parts[i]) && parts[i].toolCallId === toolCallId) return parts[i];
    }
    return null;
  }

  newToolPart(chunk) {
    const part = chunk.dynamic
      ? { type: "dynamic-tool", toolName: chunk.toolName, toolCallId: chunk.toolCallId }
      : { type: `tool-${chunk.toolName}`, toolCallId: chunk.toolCallId };
    if (chunk.providerExecuted) part.providerExecuted = true;
    if (chunk.title) part.title = chunk.title;
    this.ensureMessage().parts.push(part);
    return part;
  }

  apply(chunk) {
    const type = chunk.type;
    if (type === "start") {
      this.ensureMessage(chunk.messageId);
      if (chunk.messageMetadata) this.message.metadata = { ...this.message.metadata, ...chunk.messageMetadata };
      return;
    }
    const parts = this.ensureMessage().parts;
    switch (type) {
      case "start-step":
        parts.push({ type: "step-start" });
        break;
      case "finish-step":
      case "abort":
        break;
      case "finish":
        this.finishReason = chunk.finishReason || null;
        // The model that answered and the message's token totals so far.
        if (chunk.messageMetadata) this.message.metadata = { ...this.message.metadata, ...chunk.messageMetadata };
        break;
      case "error":
        this.error = String(chunk.errorText || "The run failed.");
        break;
      case "message-metadata":
        this.message.metadata = { ...this.message.metadata, ...chunk.messageMetadata };
        break;
      case "text-start":
      case "reasoning-start": {
        const part = { type: type === "text-start" ? "text" : "reasoning", text: "", state: "streaming" };
        parts.push(part);
        this.texts.set(`${part.type}:${chunk.id}`, part);
        break;
      }
      case "text-delta":
      case "reasoning-delta": {
        const part = this.texts.get(`${type.startsWith("text") ? "text" : "reasoning"}:${chunk.id}`);
        if (part) part.text += chunk.delta;
        break;
      }
      case "text-end":
      case "reasoning-end": {
        const part = this.texts.get(`${type.startsWith("text") ? "text" : "reasoning"}:${chunk.id}`);
        if (part) part.state = "done";
        break;
      }
      case "tool-input-start": {
        const part = this.toolPart(chunk.toolCallId) || this.newToolPart(chunk);
        part.state = "input-streaming";
        part.rawInput = "";
        break;
      }
      case "tool-input-delta": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.rawInput = (part.rawInput || "") + chunk.inputTextDelta;
        try {
          part.input = JSON.parse(part.rawInput);
        } catch {
          // partial JSON: keep the last complete value
        }
        break;
      }
      case "tool-input-available":
      case "tool-input-error": {
        const part = this.toolPart(chunk.toolCallId) || this.newToolPart(chunk);
        delete part.rawInput;
        part.input = chunk.input;
        if (type === "tool-input-error") {
          part.state = "output-error";
          part.errorText = chunk.errorText;
        } else {
          part.state = "input-available";
        }
        break;
      }
      case "tool-approval-request": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.state = "approval-requested";
        part.approval = { id: chunk.approvalId };
        break;
      }
      case "tool-approval-response": {
        const part = this.message.parts.find((p) => p.approval && p.approval.id === chunk.approvalId);
        if (!part) break;
        part.state = "approval-responded";
        part.approval = { ...part.approval, approved: chunk.approved };
        if (chunk.reason) part.approval.reason = chunk.reason;
        break;
      }
      case "tool-output-available": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.state = "output-available";
        part.output = chunk.output;
        delete part.errorText;
        if (chunk.preliminary) part.preliminary = true;
        else delete part.preliminary;
        if (part.approval) part.approval = { ...part.approval, approved: true };
        break;
      }
      case "tool-output-error": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.state = "output-error";
        part.errorText = chunk.errorText;
        break;
      }
      case "tool-output-denied": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.state = "output-denied";
        part.approval = { ...(part.approval || {}), approved: false };
        break;
      }
      case "reset-step": {
        let start = -1;
        parts.forEach((p, i) => {
          if (p.type === "step-start") start = i;
        });
        parts.splice(start + 1);
        break;
      }
      default:
        if (typeof type === "string" && type.startsWith("data-")) {
          if (chunk.transient) break;
          const existing = chunk.id !== undefined ? parts.find((p) => p.type === type && p.id === chunk.id) : null;
          if (existing) existing.data = chunk.data;
          else parts.push(chunk.id !== undefined ? { type, id: chunk.id, data: chunk.data } : { type, data: chunk.data });
          if (type === "data-parkway-widget" && chunk.data && typeof chunk.id === "string") {
            this.chat.descriptors.set(chunk.id, chunk.data);
          }
          if (type === "data-committed-revision" && chunk.data) agentPanel.committed(chunk.data);
        }
        // Sources, files and chunk types this page does not show are left out.
        break;
    }
  }
}

// -- 5. chat ---------------------------------------------------------------------------

const chat = {
  id: null,
  messages: [],
  calls: new Map(), // toolCallId -> the server's call view (GET chat, statusUrl)
  descriptors: new Map(), // toolCallId -> widget descriptor (data-parkway-widget part)
  answers: new Map(), // toolCallId -> {patch, intent, settled}: answered here, not yet sent
  inflight: new Set(), // toolCallIds whose answers the current POST carries
  messageErrors: new Map(), // messageId -> the error that ended its stream
  serverState: null, // 'idle' | 'running' | 'parked', from the last GET
  status: "ready", // 'ready' | 'submitted' | 'streaming' | 'error'
  abort: null,
  refusedContinue: null,
  syncPromise: null,
  syncAgain: false,
  polling: new Set(),

  busy() {
    return this.status === "submitted" || this.status === "streaming";
  },

  setStatus(status) {
    this.status = status;
    view.status(status);
  },

  lastAssistant() {
    const last = this.messages.at(-1);
    return last && last.role === "assistant" ? last : null;
  },

  findToolPart(toolCallId) {
    for (let m = this.messages.length - 1; m >= 0; m -= 1) {
      const parts = this.messages[m].parts || [];
      for (let i = parts.length - 1; i >= 0; i -= 1) {
        if (isToolPart(parts[i]) && parts[i].toolCallId === toolCallId) return parts[i];
      }
    }
    return null;
  },

  /** What a widget needs to know about its call. */
  callContext(toolCallId) {
    const part = this.findToolPart(toolCallId);
    const callView = this.calls.get(toolCallId) || null;
    const desc = (callView && callView.widget) || this.descriptors.get(toolCallId) || {};
    const toolName = desc.tool || (part && toolNameOf(part)) || (callView && callView.toolName) || "tool";
    const input = part && part.input !== undefined ? part.input : callView ? callView.input : undefined;
    const statusUrl = sameOrigin(desc.statusUrl) || (this.id ? callPath(this.id, toolCallId) : null);
    return {
      id: toolCallId,
      part,
      view: callView,
      desc,
      toolName,
      input,
      statusUrl,
      answer: this.answers.get(toolCallId) || null,
      outcome: this.outcomeOf(toolCallId, part, callView, desc),
    };
  },

  /** The call's outcome as the server knows it, or null while it is pending (or only
   *  answered in this tab). The server's call view wins over the message parts. */
  outcomeOf(toolCallId, part, callView, desc) {
    if (callView && callView.status === "settled" && callView.outcome) return callView.outcome;
    if (this.answers.has(toolCallId) || !part || !isResolved(part)) return null;
    const approval = desc.callKind === "approval" || part.approval !== undefined;
    switch (part.state) {
      case "output-available": {
        if (approval) return { outcome: "approved" };
        const out = part.output;
        const keys = out && typeof out === "object" && !Array.isArray(out) ? Object.keys(out) : [];
        const statusOnly = keys.length && keys.every((k) => k === "status" || k === "reason");
        if (statusOnly && ["declined", "cancelled", "timeout"].includes(out.status)) {
          return out.reason ? { outcome: out.status, reason: out.reason } : { outcome: out.status };
        }
        return { outcome: "output", output: out };
      }
      case "output-error":
        return { outcome: "error", message: part.errorText };
      case "output-denied":
        return part.approval && part.approval.reason
          ? { outcome: "denied", reason: part.approval.reason }
          : { outcome: "denied" };
      case "approval-responded":
        return part.approval && part.approval.approved ? { outcome: "approved" } : { outcome: "denied" };
      default:
        return null;
    }
  },

  // -- sending ------------------------------------------------------------------------

  /** Start a turn with the user's message. Returns false when it was not sent (the
   *  working template cannot be used: the banner says why). */
  async send(text) {
    if (this.busy()) return false;
    this.setStatus("submitted");
    const turn = await agentPanel.forTurn();
    if (turn.error) {
      this.setStatus("ready");
      view.banner(turn.error);
      return false;
    }
    if (!this.id) {
      this.id = newId("chat");
      const url = new URL(window.location.href);
      url.searchParams.set("chat", this.id);
      window.history.replaceState(null, "", url.pathname + url.search);
      view.chatId(this.id);
    }
    // A new message supersedes the calls still pending: the server cancels them.
    this.answers.clear();
    this.messages.push({ id: newId("u"), role: "user", parts: [{ type: "text", text }] });
    view.render();
    const body = { id: this.id, messages: this.messages, trigger: "submit-message" };
    // The build kit over the working template, or uncommitted edits: this turn only.
    if (turn.template !== undefined) body.agentTemplate = turn.template;
    await this.post(body, []);
    return true;
  },

  /** Record an answer to a parked call in its tool part, as `addToolOutput` /
   *  `addToolApprovalResponse` do, then send once the step is complete. `settled`: the
   *  answer was already recorded through the call's statusUrl. */
  answer(toolCallId, patch, { intent, settled = false, view: callView = null } = {}) {
    const part = this.findToolPart(toolCallId);
    if (!part) return;
    Object.assign(part, patch);
    if (patch.state !== "output-error") delete part.errorText;
    this.answers.set(toolCallId, { patch, intent, settled });
    if (callView) this.calls.set(toolCallId, callView);
    view.render();
    this.continueIfReady();
  },

  /** Someone else settled the call first: show their outcome, then catch up. */
  winner(toolCallId, outcome) {
    const callView = this.calls.get(toolCallId) || { toolCallId };
    this.calls.set(toolCallId, { ...callView, status: "settled", outcome });
    this.answers.delete(toolCallId);
    widgets.noteLost(toolCallId);
    view.render();
    this.sync();
  },

  /** `sendAutomaticallyWhen`: POST the history once every tool call of the last step has
   *  an answer and either this tab answered one of them or the server holds the chat
   *  parked with all of them settled (another tab, the OAuth callback, a timeout). */
  continueIfReady() {
    if (this.busy() || !this.id) return;
    const message = this.lastAssistant();
    if (!message) return;
    const tools = lastStep(message).filter((p) => isToolPart(p) && !p.providerExecuted);
    if (!tools.length || !tools.every(isResolved)) return;
    const mine = tools.filter((p) => this.answers.has(p.toolCallId)).map((p) => p.toolCallId);
    if (!mine.length && this.serverState !== "parked") return;
    const key = `${message.id}|${tools.map((p) => `${p.toolCallId}:${p.state}`).join(",")}|${mine.length}`;
    if (this.refusedContinue === key) return; // the server said no to exactly this: don't loop
    const body = { id: this.id, messages: this.messages, trigger: "submit-message", messageId: message.id };
    this.post(body, mine, key);
  },

  async post(body, sent, key = null) {
    this.setStatus("submitted");
    view.banner(null);
    for (const id of sent) this.inflight.add(id);
    view.render();
    let response;
    try {
      response = await api.fetch("/api/chat", { method: "POST", body });
    } catch (error) {
      this.inflight.clear();
      this.setStatus("error");
      view.banner(`Could not reach the server: ${error.message}`);
      return;
    }
    this.inflight.clear();
    if (response.ok) {
      this.refusedContinue = null;
      const intents = new Map(sent.map((id) => [id, this.answers.get(id)?.intent]));
      for (const id of sent) this.answers.delete(id);
      if (response.status === 200) await this.consume(response, { replay: false });
      else this.setStatus("ready"); // 202: answers recorded, other calls still pending
      await this.sync();
      widgets.checkIntents(intents);
      return;
    }
    const data = await response.json().catch(() => null);
    const code = data && data.error ? data.error.code : null;
    this.setStatus("ready");
    if (key) this.refusedContinue = key;
    const intents = new Map(sent.map((id) => [id, this.answers.get(id)?.intent]));
    for (const id of sent) this.answers.delete(id);
    // Lost races (another tab or the server answered first, or a run holds the chat)
    // are not errors: the widgets show the winner's outcome after the sync.
    const raced = ["already_settled", "chat_busy", "nothing_to_resume", "no_pending_call_answered"];
    if (!raced.includes(code)) {
      const text = errorMessage(data, response.status);
      if (sent.length) for (const id of sent) widgets.fail(id, text);
      else view.banner(text);
    }
    await this.sync();
    widgets.checkIntents(intents);
  },

  async consume(response, { replay }) {
    this.setStatus("streaming");
    const controller = new AbortController();
    this.abort = controller;
    const run = new StreamRun(this, { replay });
    try {
      for await (const chunk of readChunks(response)) {
        if (controller.signal.aborted) break;
        run.apply(chunk);
        view.schedule();
        if (run.error) break;
      }
    } catch (error) {
      run.error = run.error || `The stream was interrupted (${error.message}).`;
    }
    this.abort = null;
    if (run.message) {
      for (const part of run.message.parts) if (part.state === "streaming") part.state = "done";
      if (run.error) this.messageErrors.set(run.message.id, run.error);
      else this.messageErrors.delete(run.message.id);
    }
    this.setStatus(run.error ? "error" : "ready");
    view.render();
  },

  // -- catching up with the server ----------------------------------------------------

  /** Rebuild the chat from GET /api/chats/{id}; follow a run in progress; continue a
   *  parked chat whose calls are all settled. Calls made while a sync runs coalesce
   *  into one more round of it (and share its promise). */
  sync(options) {
    if (!this.id) return Promise.resolve();
    if (this.syncPromise) {
      this.syncAgain = true;
      return this.syncPromise;
    }
    this.syncPromise = this.runSync(options).finally(() => {
      this.syncPromise = null;
    });
    return this.syncPromise;
  },

  async runSync({ follow = true } = {}) {
    let again = true;
    let mayFollow = follow;
    while (again) {
      again = false;
      this.syncAgain = false;
      if (this.busy()) return; // the stream's own end syncs
      let result;
      try {
        result = await api.json(`/api/chats/${encodeURIComponent(this.id)}`);
      } catch (error) {
        view.banner(`Could not reach the server: ${error.message}`);
        return;
      }
      if (result.status === 404) {
        if (!this.messages.length) view.banner("This chat does not exist, or it belongs to another session.");
        return;
      }
      if (!result.ok) {
        view.banner(errorMessage(result.data, result.status));
        return;
      }
      this.load(result.data);
      if (result.data.state === "running" && mayFollow) {
        await this.follow();
        mayFollow = false; // once per sync: a run that is still "running" is retried by the poll
        again = true;
      } else if (this.syncAgain) {
        again = true;
      }
    }
    this.continueIfReady();
  },

  load(data) {
    this.serverState = data.state;
    this.messages = Array.isArray(data.messages) ? data.messages : [];
    this.calls = new Map((data.calls || []).map((c) => [c.toolCallId, c]));
    for (const message of this.messages) {
      for (const part of message.parts || []) {
        if (part.type === "data-parkway-widget" && typeof part.id === "string") this.descriptors.set(part.id, part.data);
      }
    }
    for (const call of this.calls.values()) if (call.widget) this.descriptors.set(call.toolCallId, call.widget);
    // Answers given here and not sent yet survive a sync while their call is pending.
    for (const [id, answer] of [...this.answers]) {
      const callView = this.calls.get(id);
      if (callView && callView.status === "settled" && !answer.settled) {
        this.answers.delete(id);
        continue;
      }
      const part = this.findToolPart(id);
      if (part) Object.assign(part, answer.patch);
    }
    view.render();
  },

  /** GET /api/chat/{id}/stream: the current message from its start, then live. */
  async follow() {
    let response;
    try {
      response = await api.fetch(`/api/chat/${encodeURIComponent(this.id)}/stream`);
    } catch {
      return;
    }
    if (response.status !== 200) return;
    await this.consume(response, { replay: true });
  },

  async stop() {
    if (!this.id) return;
    await api.fetch(`/api/chats/${encodeURIComponent(this.id)}/stop`, { method: "POST" }).catch(() => null);
  },

  /** Every ~2 s, ask each pending call's statusUrl whether someone else settled it. */
  startPolling() {
    window.setInterval(async () => {
      if (this.busy() || !this.id) return;
      for (const callView of this.calls.values()) {
        const id = callView.toolCallId;
        if (callView.status !== "pending" || this.answers.has(id) || this.polling.has(id)) continue;
        if (widgets.pollsItself(id)) continue;
        const url = this.callContext(id).statusUrl;
        if (!url) continue;
        this.polling.add(id);
        api
          .json(url)
          .then((result) => {
            if (result.ok && result.data && result.data.status === "settled") {
              this.calls.set(id, result.data);
              view.render();
              this.sync();
            }
          })
          .catch(() => null)
          .finally(() => this.polling.delete(id));
      }
      if (this.serverState === "running") this.sync();
    }, PENDING_POLL_MS);
  },
};

// -- 6. widgets ------------------------------------------------------------------------

/** A widget: one card per parked call, keyed by toolCallId. `state(ctx)` names what it
 *  shows (the `data-state` test hook); `draw(ctx, state)` builds it. It is redrawn only
 *  when what it shows changes, so text typed into it survives updates. */
class Widget {
  constructor(id, kind) {
    this.id = id;
    this.kind = kind;
    this.error = "";
    this.notice = "";
    this.busy = false;
    this.drawn = null;
    this.root = h("section", { class: "widget", "data-testid": `widget-${id}`, "data-kind": kind });
  }

  ctx() {
    return chat.callContext(this.id);
  }

  update() {
    const ctx = this.ctx();
    const state = this.state(ctx);
    this.root.dataset.state = state;
    const key = JSON.stringify([state, this.error, this.notice, this.busy, this.drawKey(ctx, state)]);
    if (key === this.drawn) return;
    this.drawn = key;
    this.root.setAttribute("aria-label", `${this.title(ctx)}`);
    this.root.replaceChildren(...this.draw(ctx, state).filter(Boolean));
  }

  drawKey(ctx) {
    return [ctx.outcome, ctx.part && ctx.part.state, ctx.part && ctx.part.output, ctx.part && ctx.part.errorText];
  }

  title(ctx) {
    return ctx.toolName;
  }

  /** The state every widget shares once its call has ended, or null. */
  endedState(ctx) {
    const outcome = ctx.outcome;
    if (!outcome) return null;
    if (outcome.outcome === "timeout" || outcome.outcome === "cancelled") return "ended";
    if (outcome.outcome === "declined") return "declined";
    if (outcome.outcome === "error") return "failed";
    if (outcome.outcome === "denied") return "denied";
    if (outcome.outcome === "approved") return "approved";
    return "answered";
  }

  localState(ctx) {
    if (!ctx.answer) return null;
    return chat.inflight.has(this.id) || chat.busy() ? "submitting" : "queued";
  }

  head(ctx, label) {
    return h(
      "div",
      { class: "widget-head" },
      h("h3", { class: "widget-title", text: this.title(ctx) }),
      h("span", { class: "widget-kind", text: label }),
    );
  }

  description(ctx) {
    return ctx.desc.description ? h("p", { class: "widget-desc", text: ctx.desc.description }) : null;
  }

  messages() {
    return [
      this.notice ? h("p", { class: "widget-hint", "data-testid": "widget-notice", text: this.notice }) : null,
      this.error ? h("p", { class: "widget-error", role: "alert", text: this.error }) : null,
    ];
  }

  deadline(ctx) {
    const ms = ctx.desc.deadline;
    if (typeof ms !== "number") return null;
    const time = new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    return h("span", { class: "deadline", text: `Expires at ${time}` });
  }

  /** The neutral and settled cards most widgets share. */
  endedCard(ctx, state) {
    const outcome = ctx.outcome || {};
    const lines = {
      ended: ["Request ended", this.endedReason(outcome), "neutral"],
      declined: ["Declined", "You chose not to answer.", "neutral"],
      failed: ["Failed", outcome.message || "The request failed.", "bad"],
    }[state];
    if (!lines) return null;
    return [
      this.head(ctx, lines[0]),
      h("p", { class: `widget-result widget-result-${lines[2]}`, text: lines[1] }),
      ...this.messages(),
    ];
  }

  endedReason(outcome) {
    if (outcome.outcome === "timeout") return "Request ended: nobody answered in time.";
    if (outcome.reason === "superseded_by_user_message") return "Request ended: a new message replaced it.";
    return "Request ended without an answer.";
  }

  queuedCard(ctx, state) {
    if (state === "submitting") return h("p", { class: "widget-result widget-result-neutral", text: "Sending…" });
    return h("p", { class: "widget-result widget-result-neutral", text: "Answered. It is sent once the other requests above are answered too." });
  }

  /** POST the call's statusUrl. Returns the call view, or null (after showing the
   *  winner on 409, or an error). */
  async settle(body) {
    const url = this.ctx().statusUrl;
    if (!url) return null;
    this.busy = true;
    this.error = "";
    this.update();
    try {
      const result = await api.json(url, { method: "POST", body });
      if (result.ok) return result.data;
      const outcome = result.data && result.data.error ? result.data.error.outcome : null;
      if (result.status === 409 && outcome) {
        chat.winner(this.id, outcome);
      } else {
        this.error = errorMessage(result.data, result.status);
      }
      return null;
    } catch (error) {
      this.error = `Could not reach the server: ${error.message}`;
      return null;
    } finally {
      this.busy = false;
      this.update();
    }
  }

  pollsItself() {
    return false;
  }

  dispose() {}
}

class ApprovalWidget extends Widget {
  constructor(id) {
    super(id, "approval");
    this.editor = h("textarea", { id: `edit-${id}`, "data-field": "input", spellcheck: "false", rows: 6 });
    this.reason = h("input", { type: "text", id: `reason-${id}`, "data-field": "reason", placeholder: "Optional" });
  }

  title(ctx) {
    return `Approve ${ctx.toolName}?`;
  }

  state(ctx) {
    return this.localState(ctx) || this.endedState(ctx) || "pending";
  }

  approvalId(ctx) {
    return (ctx.part && ctx.part.approval && ctx.part.approval.id) || ctx.desc.approvalId || (ctx.view && ctx.view.approvalId);
  }

  draw(ctx, state) {
    if (state === "approved") {
      const edited = ctx.outcome && ctx.outcome.input !== undefined;
      const part = ctx.part;
      const ran = part && part.state === "output-available" ? pretty(part.output) : null;
      const failed = part && part.state === "output-error" ? part.errorText : null;
      return [
        this.head(ctx, "Approved"),
        h("p", { class: "widget-result widget-result-ok", text: edited ? "Approved with edits ✓" : "Approved ✓" }),
        edited ? h("pre", { class: "json", "aria-label": "Approved input", text: pretty(ctx.outcome.input) }) : null,
        ran !== null ? h("pre", { class: "json", "aria-label": "Result", text: ran }) : null,
        failed ? h("p", { class: "widget-error", text: `The tool failed: ${failed}` }) : null,
        ...this.messages(),
      ];
    }
    if (state === "denied") {
      const reason = ctx.outcome && ctx.outcome.reason;
      return [
        this.head(ctx, "Denied"),
        h("p", { class: "widget-result widget-result-bad", text: reason ? `Denied: ${reason}` : "Denied" }),
        ...this.messages(),
      ];
    }
    if (state === "ended") return this.endedCard(ctx, state);
    if (state === "submitting" || state === "queued") {
      const approved = ctx.answer && ctx.answer.intent === "approved";
      return [this.head(ctx, approved ? "Approving" : "Denying"), this.queuedCard(ctx, state), ...this.messages()];
    }
    const allowEdits = ctx.desc.allowEdits === true;
    if (allowEdits && !this.editor.dataset.touched) this.editor.value = pretty(ctx.input ?? {});
    this.editor.oninput = () => {
      this.editor.dataset.touched = "1";
    };
    return [
      this.head(ctx, "Approval"),
      this.description(ctx),
      h("div", { class: "tool-label", text: "What will run" }),
      allowEdits
        ? h("label", { class: "widget-field", for: this.editor.id }, "Input (you may edit it before approving)", this.editor)
        : h("pre", { class: "json", "aria-label": "Input", text: pretty(ctx.input) }),
      ...this.decision(ctx),
    ];
  }

  /** The reason field, Approve and Deny, the deadline and any messages. */
  decision(ctx) {
    return [
      h("label", { class: "widget-field", for: this.reason.id }, "Reason (optional, sent with a denial)", this.reason),
      h(
        "div",
        { class: "widget-actions" },
        h("button", { type: "button", class: "button button-primary", "data-action": "approve", disabled: this.busy, onclick: () => this.approve() }, "Approve"),
        h("button", { type: "button", class: "button button-danger", "data-action": "deny", disabled: this.busy, onclick: () => this.deny() }, "Deny"),
        this.deadline(ctx),
      ),
      ...this.messages(),
    ];
  }

  async approve() {
    const ctx = this.ctx();
    const approval = { id: this.approvalId(ctx), approved: true };
    if (ctx.desc.allowEdits === true) {
      let edited;
      try {
        edited = JSON.parse(this.editor.value);
      } catch (error) {
        this.error = `The input is not valid JSON: ${error.message}`;
        this.update();
        return;
      }
      if (canonical(edited) !== canonical(ctx.input ?? {})) {
        // The AI SDK's approval response cannot carry an edited input, so the edit is
        // settled through the call's statusUrl; the chat POST then resumes the run.
        const callView = await this.settle({ outcome: "approved", input: edited });
        if (!callView) return;
        chat.answer(this.id, { state: "approval-responded", approval }, { intent: "approved", settled: true, view: callView });
        return;
      }
    }
    this.error = "";
    chat.answer(this.id, { state: "approval-responded", approval }, { intent: "approved" });
  }

  deny() {
    const ctx = this.ctx();
    const approval = { id: this.approvalId(ctx), approved: false };
    const reason = this.reason.value.trim();
    if (reason) approval.reason = reason;
    this.error = "";
    chat.answer(this.id, { state: "approval-responded", approval }, { intent: "denied" });
  }
}

/** commit_config: the agent asks to change its own template. The card shows the
 *  summary and a line diff of the committed head against what the server would commit
 *  (runner/commits.py `apply_patch`, mirrored by commit-diff.js `applyPatch`). */
class CommitApprovalWidget extends ApprovalWidget {
  constructor(id) {
    super(id);
    this.root.dataset.tool = "commit_config";
    this.committed = null; // {version, template}: the head the diff is drawn against
    this.committedError = "";
    this.fetching = false;
  }

  title() {
    return "Approve this change to the agent?";
  }

  drawKey(ctx, state) {
    return [...super.drawKey(ctx, state), this.committed && this.committed.version, this.committedError];
  }

  draw(ctx, state) {
    if (state !== "pending" || ctx.desc.allowEdits === true) return super.draw(ctx, state);
    if (!this.committed && !this.committedError && !this.fetching) this.fetchCommitted();
    const input = ctx.input && typeof ctx.input === "object" ? ctx.input : {};
    const summary = typeof input.summary === "string" ? input.summary : "";
    let diff;
    if (this.committedError) {
      diff = h("p", { class: "widget-error", text: this.committedError });
    } else if (!this.committed) {
      diff = h("p", { class: "widget-result widget-result-neutral", text: "Loading the current template…" });
    } else {
      try {
        diff = diffView(this.committed.template, applyPatch(this.committed.template, input));
      } catch (error) {
        diff = h("p", { class: "widget-error", "data-testid": "commit-diff-error", text: `The patch cannot be applied: ${error.message}` });
      }
    }
    return [
      this.head(ctx, "Agent change"),
      summary ? h("p", { class: "commit-summary", "data-testid": "commit-summary-text", text: summary }) : null,
      h("div", { class: "tool-label", text: this.committed ? `Changes to version ${this.committed.version}` : "Changes" }),
      diff,
      h("details", { class: "commit-raw" }, h("summary", {}, "The call's input"), h("pre", { class: "json", "aria-label": "Input", text: pretty(ctx.input) })),
      ...this.decision(ctx),
    ];
  }

  /** The committed head, read once: the diff shows the change against what is live. */
  async fetchCommitted() {
    this.fetching = true;
    try {
      const result = await api.json("/api/agent");
      if (result.ok && result.data && result.data.template && typeof result.data.template === "object") {
        this.committed = { version: result.data.version, template: result.data.template };
      } else {
        this.committedError = `The current template could not be read: ${errorMessage(result.data, result.status)}`;
      }
    } catch (error) {
      this.committedError = `Could not reach the server: ${error.message}`;
    } finally {
      this.fetching = false;
    }
    this.update();
  }
}

class ChoiceWidget extends Widget {
  constructor(id) {
    super(id, "choice");
  }

  title(ctx) {
    const question = ctx.input && typeof ctx.input.question === "string" ? ctx.input.question : null;
    return question || `${ctx.toolName}: pick one`;
  }

  state(ctx) {
    return this.localState(ctx) || this.endedState(ctx) || "pending";
  }

  draw(ctx, state) {
    if (state === "answered") {
      const output = ctx.outcome && ctx.outcome.output;
      const choice = output && typeof output.choice === "string" ? output.choice : pretty(output);
      return [this.head(ctx, "Answered"), h("p", { class: "widget-result widget-result-ok", text: `You chose “${choice}”` }), ...this.messages()];
    }
    if (state === "ended" || state === "declined" || state === "failed") return this.endedCard(ctx, state);
    if (state === "submitting" || state === "queued") {
      const choice = ctx.answer.patch.output && ctx.answer.patch.output.choice;
      return [this.head(ctx, "Answered"), h("p", { class: "widget-result", text: `You chose “${choice}”` }), this.queuedCard(ctx, state), ...this.messages()];
    }
    const options = ctx.input && Array.isArray(ctx.input.options) ? ctx.input.options.filter((o) => typeof o === "string") : [];
    return [
      this.head(ctx, "Choice"),
      this.description(ctx),
      h(
        "div",
        { class: "widget-actions", role: "group", "aria-label": "Options" },
        options.map((option) =>
          h("button", { type: "button", class: "button button-option", "data-action": "choose", "data-value": option, disabled: this.busy, onclick: () => this.choose(option) }, option),
        ),
        this.deadline(ctx),
      ),
      ...this.messages(),
    ];
  }

  choose(option) {
    this.error = "";
    chat.answer(this.id, { state: "output-available", output: { choice: option } }, { intent: "output" });
  }
}

/** The generic client-tool widget: a JSON editor for the output, and Decline. */
class ClientWidget extends Widget {
  constructor(id) {
    super(id, "client");
    this.editor = h("textarea", { id: `output-${id}`, "data-field": "output", spellcheck: "false", rows: 5 });
    this.editor.value = "{}";
  }

  title(ctx) {
    return ctx.toolName;
  }

  state(ctx) {
    return this.localState(ctx) || this.endedState(ctx) || "pending";
  }

  draw(ctx, state) {
    if (state === "answered") {
      return [this.head(ctx, "Answered"), h("p", { class: "widget-result widget-result-ok", text: "Answer sent ✓" }), h("pre", { class: "json", "aria-label": "Output", text: pretty(ctx.outcome.output) }), ...this.messages()];
    }
    if (state === "ended" || state === "declined" || state === "failed") return this.endedCard(ctx, state);
    if (state === "submitting" || state === "queued") return [this.head(ctx, "Answered"), this.queuedCard(ctx, state), ...this.messages()];
    return [
      this.head(ctx, "Needs your answer"),
      this.description(ctx),
      h("div", { class: "tool-label", text: "Request" }),
      h("pre", { class: "json", "aria-label": "Input", text: pretty(ctx.input) }),
      h("label", { class: "widget-field", for: this.editor.id }, "Your answer (JSON)", this.editor),
      h(
        "div",
        { class: "widget-actions" },
        h("button", { type: "button", class: "button button-primary", "data-action": "submit", disabled: this.busy, onclick: () => this.submit() }, "Send answer"),
        h("button", { type: "button", class: "button", "data-action": "decline", disabled: this.busy, onclick: () => this.decline() }, "Decline"),
        this.deadline(ctx),
      ),
      ...this.messages(),
    ];
  }

  submit() {
    let output;
    try {
      output = JSON.parse(this.editor.value);
    } catch (error) {
      this.error = `Not valid JSON: ${error.message}`;
      this.update();
      return;
    }
    this.error = "";
    chat.answer(this.id, { state: "output-available", output }, { intent: "output" });
  }

  async decline() {
    // "declined" is not an AI SDK tool state: it is settled through statusUrl.
    const callView = await this.settle({ outcome: "declined" });
    if (!callView) return;
    chat.answer(this.id, { state: "output-available", output: { status: "declined" } }, { intent: "declined", settled: true, view: callView });
  }
}

/** A call this page has no widget for (a render kind it does not know): say so, and
 *  settle it with an error so the agent is not left waiting. */
class UnsupportedWidget extends Widget {
  constructor(id) {
    super(id, "unsupported");
    this.tried = false;
  }

  title() {
    return "This app cannot handle that request";
  }

  state(ctx) {
    const ended = this.endedState(ctx);
    if (ended === "ended" || ended === "answered" || ended === "declined") return ended;
    return "unsupported";
  }

  draw(ctx, state) {
    if (state === "ended" || state === "declined") return this.endedCard(ctx, state);
    const kind = ctx.desc.kind || "unknown";
    const settled = ctx.outcome !== null;
    return [
      this.head(ctx, "Unsupported"),
      h("p", { class: "widget-desc", text: `The agent asked for “${ctx.toolName}” with a “${kind}” widget, which this page does not have.` }),
      h("p", { class: "widget-result widget-result-neutral", text: settled ? "The agent was told it could not be done." : "Telling the agent…" }),
      ...this.messages(),
    ];
  }

  update() {
    super.update();
    const ctx = this.ctx();
    if (this.tried || ctx.outcome || ctx.answer || !ctx.view || ctx.view.status !== "pending") return;
    this.tried = true;
    this.report(ctx);
  }

  async report(ctx) {
    const message = `This app cannot handle '${ctx.toolName}' requests (widget kind '${ctx.desc.kind || "unknown"}').`;
    const callView = await this.settle({ outcome: "error", message });
    if (!callView) return;
    chat.answer(this.id, { state: "output-error", errorText: message }, { intent: "error", settled: true, view: callView });
  }
}

/** request_connection: an OAuth popup the server completes. The server is the source
 *  of truth (DESIGN §6): the popup's postMessage is only a hint to look now, the widget
 *  polls the call's status while connecting, and a popup that reads `closed` (which a
 *  provider's Cross-Origin-Opener-Policy also causes) is never taken as a cancel. */
class ConnectWidget extends Widget {
  constructor(id) {
    super(id, "connect");
    this.phase = "idle"; // idle | connecting | retrying | reconnected
    this.popup = null;
    this.blocked = null; // the URL to offer as a link when the popup was blocked
    this.closedAt = null;
    this.closedHint = false;
    this.timer = null;
    this.checking = false;
    this.hints = 0;
    this.account = null;
    this.connectedName = null; // the provider's name from the confirming connection
    this.retryNote = "";
    this.retryPressedAt = null;
    this.retryBaseline = null; // a promise of the connection list read when Retry was pressed
    this.hinted = false; // a verified "connected" message arrived during this retry
    this.confirming = false;
    this.existing = null; // the caller's active connections to this provider, once read
    this.fetchingExisting = false;
    this.onMessage = (event) => this.message(event);
    this.root.dataset.hints = "0";
  }

  providerName(ctx) {
    if (typeof ctx.desc.providerName === "string" && ctx.desc.providerName) return ctx.desc.providerName;
    const provider = ctx.desc.provider || (ctx.input && ctx.input.provider) || "the account";
    return provider.charAt(0).toUpperCase() + provider.slice(1);
  }

  title(ctx) {
    return `Connect ${this.providerName(ctx)}`;
  }

  connectionsUrl(ctx) {
    const given = sameOrigin(ctx.desc.connectionsUrl);
    if (given) return given;
    const provider = ctx.desc.provider || (ctx.input && ctx.input.provider);
    return provider ? `/api/connections?provider=${encodeURIComponent(provider)}` : null;
  }

  /** The caller's connections to this provider (GET connectionsUrl), or null. */
  async listConnections(ctx) {
    const url = this.connectionsUrl(ctx);
    if (!url) return null;
    const result = await api.json(url);
    if (!result.ok || !result.data || !Array.isArray(result.data.connections)) return null;
    const provider = ctx.desc.provider || (ctx.input && ctx.input.provider);
    return result.data.connections.filter((c) => c && typeof c === "object" && typeof c.id === "string" && (!provider || c.provider === provider));
  }

  /** Read once, for a pending call: the active connections the user may answer with. */
  fetchExisting(ctx) {
    if (this.existing !== null || this.fetchingExisting || ctx.desc.configured === false || !ctx.desc.useUrl) return;
    this.fetchingExisting = true;
    this.listConnections(ctx)
      .then((list) => {
        this.existing = (list || []).filter((c) => c.status === "active");
      })
      .catch(() => {
        this.existing = [];
      })
      .finally(() => {
        this.fetchingExisting = false;
        this.update();
      });
  }

  startUrl(ctx) {
    const given = sameOrigin(ctx.desc.startUrl);
    if (given) return given;
    const provider = ctx.desc.provider || (ctx.input && ctx.input.provider);
    if (!provider || !chat.id) return null;
    const query = `chat=${encodeURIComponent(chat.id)}&call=${encodeURIComponent(this.id)}`;
    return `/connect/${encodeURIComponent(provider)}/start?${query}`;
  }

  state(ctx) {
    const outcome = ctx.outcome;
    if (this.phase === "reconnected") return "reconnected";
    if (outcome) {
      if (outcome.outcome === "output" && outcome.output && outcome.output.connected === true) return "connected";
      if (outcome.outcome === "cancelled" && outcome.reason === "superseded_by_user_message") return "ended";
      if (this.phase === "retrying") return "retrying";
      return outcome.outcome === "declined" ? "declined" : "failed";
    }
    if (ctx.answer) return this.localState(ctx);
    return this.phase === "connecting" ? "connecting" : "pending";
  }

  drawKey(ctx, state) {
    const existing = (this.existing || []).map((c) => [c.id, c.account]);
    return [...super.drawKey(ctx), this.phase, this.blocked, this.closedHint, this.account, this.connectedName, this.retryNote, existing, state];
  }

  pollsItself() {
    return this.phase === "connecting";
  }

  draw(ctx, state) {
    const name = this.providerName(ctx);
    const scopes = Array.isArray(ctx.desc.scopes) && ctx.desc.scopes.length ? ctx.desc.scopes : null;
    const reason = ctx.input && typeof ctx.input.reason === "string" ? ctx.input.reason : null;
    const button = (action, label, onclick, cls = "button") =>
      h("button", { type: "button", class: cls, "data-action": action, disabled: this.busy, onclick }, label);
    const blockedLink = this.blocked
      ? h(
          "p",
          { class: "widget-hint" },
          "Your browser blocked the pop-up. ",
          h("a", { href: this.blocked, target: "_blank", "data-action": "open-tab", onclick: () => this.openedInTab() }, "Continue in a new tab"),
        )
      : null;
    switch (state) {
      case "connected": {
        const output = ctx.outcome.output || {};
        const account = typeof output.account === "string" ? output.account : null;
        return [
          this.head(ctx, "Connected"),
          h("p", { class: "widget-result widget-result-ok", text: `${name} connected ✓` }),
          account ? h("p", { class: "widget-desc", "data-testid": "connect-account", text: `Account: ${account}` }) : null,
          ...this.messages(),
        ];
      }
      case "reconnected": {
        const who = this.account ? ` (${this.account})` : "";
        return [
          this.head(ctx, "Connected"),
          h("p", { class: "widget-result widget-result-ok", "data-testid": "connect-reconnected", text: `${this.connectedName || name} connected ✓${who} — ask the agent to continue` }),
          h("p", { class: "widget-desc", text: "This request had already ended, so the chat does not continue by itself." }),
          ...this.messages(),
        ];
      }
      case "ended":
        return this.endedCard(ctx, state);
      case "declined":
      case "failed": {
        const outcome = ctx.outcome || {};
        // The callback records a provider's refusal as an output {connected: false, reason}.
        const output = outcome.outcome === "output" && outcome.output && typeof outcome.output === "object" ? outcome.output : null;
        const reasonOf = output && typeof output.reason === "string" ? output.reason : outcome.outcome;
        const why = {
          declined: "You chose not to connect for now.",
          cancelled: "The connection was cancelled.",
          timeout: "The connection request timed out.",
          denied: `Access was not allowed at ${name}.`,
          error: (output && typeof output.message === "string" && output.message) || outcome.message || "The connection failed.",
        }[reasonOf] || "";
        return [
          this.head(ctx, "Not connected"),
          state === "declined"
            ? h("p", { class: "widget-result widget-result-neutral", text: `${name} not connected` })
            : h("p", { class: "widget-result widget-result-bad", text: "Connection not completed" }),
          why ? h("p", { class: "widget-desc", text: why }) : null,
          this.retryNote ? h("p", { class: "widget-hint", text: this.retryNote }) : null,
          h("div", { class: "widget-actions" }, button("retry", `Retry`, () => this.retry())),
          blockedLink,
          ...this.messages(),
        ];
      }
      case "retrying":
      case "connecting":
        return [
          this.head(ctx, "Connecting"),
          h("p", { class: "widget-result", role: "status", text: `Connecting ${name}…` }),
          h("p", { class: "widget-desc", text: "Finish signing in in the pop-up window." }),
          this.closedHint ? h("p", { class: "widget-hint", "data-testid": "popup-closed-hint", text: "Did you close the window? If you did, cancel and try again." }) : null,
          h("div", { class: "widget-actions" }, button("cancel", "Cancel", () => this.cancel())),
          ...this.messages(),
        ];
      case "submitting":
      case "queued":
        return [this.head(ctx, "Connect"), this.queuedCard(ctx, state), ...this.messages()];
      default: {
        this.fetchExisting(ctx);
        const existing = this.existing || [];
        return [
          this.head(ctx, "Connect an account"),
          reason ? h("p", { class: "widget-desc", text: reason }) : this.description(ctx),
          scopes ? h("p", { class: "widget-desc", text: `Access requested: ${scopes.join(", ")}` }) : null,
          ctx.desc.configured === false
            ? h("p", { class: "widget-hint", text: `This server has no ${name} sign-in configured; the connection will not complete.` })
            : null,
          h(
            "div",
            { class: "widget-actions" },
            button("connect", `Connect ${name}`, () => this.connect(), "button button-primary"),
            button("decline", "Not now", () => this.notNow()),
            this.deadline(ctx),
          ),
          existing.length
            ? h(
                "div",
                { class: "widget-existing", "data-testid": "connect-existing" },
                h("p", { class: "widget-desc", text: "Or answer with a connection you already have:" }),
                h(
                  "div",
                  { class: "widget-actions" },
                  existing.map((c) =>
                    h("button", { type: "button", class: "button button-option", "data-action": "use", "data-connection": c.id, disabled: this.busy, onclick: () => this.use(c) }, `Use ${c.account}`),
                  ),
                ),
              )
            : null,
          blockedLink,
          ...this.messages(),
        ];
      }
    }
  }

  /** Answer the call with an existing connection: the server settles it (useUrl), and
   *  the chat continues with the outcome it recorded. */
  async use(connection) {
    const ctx = this.ctx();
    const url = sameOrigin(ctx.desc.useUrl);
    if (!url || !chat.id) return;
    this.busy = true;
    this.error = "";
    this.update();
    let result = null;
    try {
      result = await api.json(url, { method: "POST", body: { chatId: chat.id, toolCallId: this.id, connectionId: connection.id } });
    } catch (error) {
      this.error = `Could not reach the server: ${error.message}`;
    }
    this.busy = false;
    if (result && result.ok && result.data && result.data.outcome) {
      this.finish({ ...(ctx.view || {}), toolCallId: this.id, status: "settled", outcome: result.data.outcome });
      return;
    }
    const winner = result && result.data && result.data.error ? result.data.error.outcome : null;
    if (result && result.status === 409 && winner) {
      chat.winner(this.id, winner);
      return;
    }
    if (result) this.error = errorMessage(result.data, result.status);
    this.update();
  }

  // The popup must open synchronously inside the click handler, or it is blocked.
  connect() {
    const url = this.startUrl(this.ctx());
    if (!url) {
      this.error = "This request has no sign-in address.";
      this.update();
      return;
    }
    this.open(url, "connecting");
  }

  retry() {
    const ctx = this.ctx();
    const base = this.startUrl(ctx);
    if (!base) return;
    this.open(`${base}${base.includes("?") ? "&" : "?"}retry=1`, "retrying");
    // What the server had when Retry was pressed: the retry is confirmed only by a
    // connection stored or refreshed after this (see confirmRetry).
    this.retryPressedAt = Date.now();
    this.hinted = false;
    this.retryBaseline = this.listConnections(ctx)
      .then((list) => (list ? new Map(list.map((c) => [c.id, c.updatedAt])) : null))
      .catch(() => null);
  }

  open(url, phase) {
    this.error = "";
    this.retryNote = "";
    const popup = window.open(url, `parkway-connect-${this.id}`, "popup=yes,width=520,height=720");
    if (!popup) {
      this.blocked = url;
      this.blockedPhase = phase;
      this.update();
      return;
    }
    this.begin(popup, phase);
  }

  openedInTab() {
    // A new tab has no opener link: only the server's status tells when it is done.
    this.begin(null, this.blockedPhase || "connecting");
  }

  begin(popup, phase) {
    this.stopFlow();
    this.popup = popup;
    this.phase = phase;
    this.blocked = null;
    this.closedAt = null;
    this.closedHint = false;
    window.addEventListener("message", this.onMessage);
    if (phase === "connecting") this.timer = window.setInterval(() => this.tick(), CONNECT_POLL_MS);
    else this.timer = window.setInterval(() => this.watchRetry(), CONNECT_POLL_MS);
    this.update();
  }

  stopFlow() {
    window.removeEventListener("message", this.onMessage);
    if (this.timer) window.clearInterval(this.timer);
    this.timer = null;
  }

  /** Accept only the callback page in this widget's own popup, on the API's origin,
   *  naming this chat and call; even then it only means "ask the server now". */
  message(event) {
    if (event.origin !== API_ORIGIN) return;
    if (!this.popup || event.source !== this.popup) return;
    const data = event.data;
    if (!data || typeof data !== "object" || data.type !== "parkway:connect") return;
    if (data.chatId !== chat.id || data.toolCallId !== this.id || typeof data.outcome !== "string") return;
    this.hints += 1;
    this.root.dataset.hints = String(this.hints);
    if (this.phase === "retrying") {
      // A retry is a new flow for an already settled call: there is no call status to
      // confirm it with, so a "connected" hint is confirmed with the connection list.
      if (data.outcome === "connected") {
        this.hinted = true;
        this.confirmRetry();
        return;
      }
      this.stopFlow();
      this.phase = "idle";
      this.retryNote = "The retry did not complete.";
      this.update();
      return;
    }
    this.check();
  }

  async tick() {
    if (this.popup && this.popup.closed && this.closedAt === null) this.closedAt = Date.now();
    await this.check();
    if (this.phase !== "connecting") return;
    if (this.closedAt !== null && !this.closedHint && Date.now() - this.closedAt >= POPUP_CLOSED_GRACE_MS) {
      this.closedHint = true;
      this.root.dataset.popup = "closed";
      this.update();
    }
  }

  async watchRetry() {
    if (await this.confirmRetry()) return;
    if (this.phase !== "retrying") return;
    if (this.popup && this.popup.closed) {
      if (this.closedAt === null) this.closedAt = Date.now();
      else if (Date.now() - this.closedAt >= POPUP_CLOSED_GRACE_MS) {
        this.stopFlow();
        this.phase = "idle";
        this.retryNote = this.hinted
          ? "The sign-in said it connected, but the server has no new connection. Try again."
          : "The retry window was closed before it finished.";
        this.update();
      }
    }
  }

  /** Confirm a retry with the server: a connection of this provider stored or refreshed
   *  after Retry was pressed, i.e. new or newer than in the list read at that moment
   *  (the server's own clock on both sides); by the page's clock only when that read
   *  failed. Neither the popup's message nor its closing is taken as proof. */
  async confirmRetry() {
    if (this.confirming || this.phase !== "retrying") return false;
    this.confirming = true;
    try {
      const baseline = await this.retryBaseline;
      const list = await this.listConnections(this.ctx());
      if (!list || this.phase !== "retrying") return false;
      const fresh = list.filter((c) => {
        if (c.status !== "active" || typeof c.updatedAt !== "number") return false;
        if (baseline) return !baseline.has(c.id) || c.updatedAt > baseline.get(c.id);
        return c.updatedAt > this.retryPressedAt;
      });
      if (!fresh.length) return false;
      const latest = fresh.reduce((a, b) => (b.updatedAt > a.updatedAt ? b : a));
      this.stopFlow();
      this.phase = "reconnected";
      this.account = typeof latest.account === "string" ? latest.account : null;
      this.connectedName = typeof latest.providerName === "string" && latest.providerName ? latest.providerName : null;
      this.update();
      return true;
    } catch {
      return false; // the next tick asks again
    } finally {
      this.confirming = false;
    }
  }

  /** Ask the server; settle the widget if the call is settled. */
  async check() {
    const url = this.ctx().statusUrl;
    if (!url || this.checking) return;
    this.checking = true;
    try {
      const result = await api.json(url);
      if (result.ok && result.data && result.data.status === "settled") this.finish(result.data);
    } catch {
      // the next tick asks again
    } finally {
      this.checking = false;
    }
  }

  /** The call is settled (by the OAuth callback, this tab, another tab or a timeout):
   *  show it and continue the chat with the result the server recorded. */
  finish(callView) {
    this.stopFlow();
    this.phase = "idle";
    this.root.removeAttribute("data-popup");
    chat.calls.set(this.id, callView);
    const part = chat.findToolPart(this.id);
    if (part && !isResolved(part) && callView.outcome) {
      const outcome = callView.outcome;
      let output;
      if (outcome.outcome === "output") output = outcome.output;
      else {
        output = { connected: false, reason: outcome.outcome };
        if (outcome.outcome === "error" && outcome.message) output.message = outcome.message;
      }
      chat.answer(this.id, { state: "output-available", output }, { settled: true, view: callView });
    } else {
      view.render();
    }
  }

  async notNow() {
    const callView = await this.settle({ outcome: "declined" });
    if (callView) this.finish(callView);
  }

  async cancel() {
    if (this.phase === "retrying") {
      this.stopFlow();
      this.phase = "idle";
      this.closePopup();
      this.update();
      return;
    }
    const callView = await this.settle({ outcome: "cancelled" });
    if (callView) {
      this.closePopup();
      this.finish(callView);
    }
  }

  closePopup() {
    try {
      if (this.popup && !this.popup.closed) this.popup.close();
    } catch {
      // a severed popup cannot be closed from here
    }
  }

  update() {
    super.update();
    // Another tab, the callback or the sweeper settled the call while this one waited.
    const ctx = this.ctx();
    if (ctx.outcome && this.phase === "connecting") this.finish(ctx.view || { toolCallId: this.id, status: "settled", outcome: ctx.outcome });
  }

  dispose() {
    this.stopFlow();
  }
}

/** Widget dispatch: by the descriptor's kind, then by tool name, then the generic
 *  client widget for a client tool with no render kind; anything else is unsupported. */
const WIDGETS_BY_KIND = { approval: ApprovalWidget, connect: ConnectWidget, choice: ChoiceWidget, client: ClientWidget };
const WIDGETS_BY_TOOL = { choose_option: ChoiceWidget, request_connection: ConnectWidget };

const widgets = {
  live: new Map(),

  classFor(desc, toolName) {
    if (desc.callKind === "approval") return (desc.tool || toolName) === "commit_config" ? CommitApprovalWidget : ApprovalWidget;
    const kind = typeof desc.kind === "string" ? desc.kind : "client";
    if (Object.hasOwn(WIDGETS_BY_KIND, kind)) return WIDGETS_BY_KIND[kind];
    if (Object.hasOwn(WIDGETS_BY_TOOL, toolName)) return WIDGETS_BY_TOOL[toolName];
    return UnsupportedWidget;
  },

  /** The widget of a parked call (made once per toolCallId), or null for a call that
   *  was never parked. */
  for(toolCallId, toolName) {
    const existing = this.live.get(toolCallId);
    if (existing) return existing;
    const desc = chat.descriptors.get(toolCallId) || (chat.calls.get(toolCallId) || {}).widget;
    if (!desc) return null;
    const Kind = this.classFor(desc, toolName);
    const widget = new Kind(toolCallId);
    this.live.set(toolCallId, widget);
    return widget;
  },

  pollsItself(toolCallId) {
    const widget = this.live.get(toolCallId);
    return widget ? widget.pollsItself() : false;
  },

  fail(toolCallId, text) {
    const widget = this.live.get(toolCallId);
    if (widget) widget.error = text;
  },

  noteLost(toolCallId) {
    const widget = this.live.get(toolCallId);
    if (widget) widget.notice = "Someone else answered this first; their answer is shown.";
  },

  /** After a POST: where the server's outcome is not what this tab answered, say so. */
  checkIntents(intents) {
    for (const [id, intent] of intents) {
      if (!intent) continue;
      const outcome = chat.callContext(id).outcome;
      if (outcome && outcome.outcome !== intent) this.noteLost(id);
    }
    view.render();
  },
};

// -- 7. view ---------------------------------------------------------------------------

const view = {
  pending: false,
  els: {},

  init() {
    for (const id of ["messages", "scroller", "empty", "composer", "composer-form", "send", "stop", "banner", "banner-text", "banner-close", "chat-status", "chat-id", "new-chat"]) {
      this.els[id] = document.getElementById(id);
    }
  },

  schedule() {
    if (this.pending) return;
    this.pending = true;
    window.requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  },

  status(status) {
    const el = this.els["chat-status"];
    el.dataset.status = status;
    el.textContent = { ready: "Ready", submitted: "Sending…", streaming: "Streaming…", error: "Error" }[status];
    const busy = status === "submitted" || status === "streaming";
    this.els.send.disabled = busy;
    this.els.stop.hidden = !busy;
  },

  chatId(id) {
    this.els["chat-id"].textContent = id || "";
  },

  banner(text) {
    this.els.banner.hidden = !text;
    this.els["banner-text"].textContent = text || "";
  },

  render() {
    const list = this.els.messages;
    const scroller = this.els.scroller;
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
    this.els.empty.hidden = chat.messages.length > 0;
    const existing = new Map([...list.children].map((li) => [li.dataset.id, li]));
    const wanted = [];
    for (const message of chat.messages) {
      let li = existing.get(message.id);
      if (!li || li.dataset.role !== message.role) {
        li = h("li", { class: `message message-${message.role}`, "data-id": message.id, "data-role": message.role, "data-testid": `message-${message.role}` });
      }
      this.renderParts(li, message);
      wanted.push(li);
    }
    wanted.forEach((li, index) => {
      if (list.children[index] !== li) list.insertBefore(li, list.children[index] || null);
    });
    while (list.children.length > wanted.length) list.lastElementChild.remove();
    for (const [id, widget] of widgets.live) {
      if (!widget.root.isConnected && !chat.findToolPart(id)) {
        widget.dispose();
        widgets.live.delete(id);
      }
    }
    if (atBottom) scroller.scrollTop = scroller.scrollHeight;
  },

  renderParts(li, message) {
    const shown = (message.parts || []).filter((p) => p.type === "text" || p.type === "reasoning" || isToolPart(p));
    const items = shown.map((part, index) => {
      const key = isToolPart(part) ? `tool:${part.toolCallId}` : `${part.type}:${index}`;
      let el = [...li.children].find((child) => child.dataset.key === key);
      if (!el) el = this.partElement(part, key);
      this.updatePart(el, part);
      return el;
    });
    const error = chat.messageErrors.get(message.id);
    if (error) {
      let el = [...li.children].find((child) => child.dataset.key === "error");
      if (!el) el = h("div", { class: "message-error", role: "alert", "data-key": "error", "data-testid": "message-error" });
      el.textContent = error;
      items.push(el);
    }
    const footer = messageFooter([...li.children].find((child) => child.dataset.key === "footer"), message);
    if (footer) items.push(footer);
    items.forEach((el, index) => {
      if (li.children[index] !== el) li.insertBefore(el, li.children[index] || null);
    });
    while (li.children.length > items.length) li.lastElementChild.remove();
  },

  partElement(part, key) {
    if (part.type === "reasoning") return reasoningElement(key);
    if (!isToolPart(part)) return h("div", { class: "text", "data-key": key });
    const name = toolNameOf(part);
    const details = h(
      "details",
      { class: "tool", "data-testid": `tool-${part.toolCallId}`, "data-tool": name },
      h("summary", {}, h("span", { class: "tool-name", text: name }), h("span", { class: "badge" })),
      h("div", { class: "tool-body" }),
    );
    return h("div", { class: "tool-block", "data-key": key }, details);
  },

  updatePart(el, part) {
    if (part.type === "reasoning") {
      updateReasoning(el, part);
      return;
    }
    if (!isToolPart(part)) {
      if (el.textContent !== part.text) el.textContent = part.text;
      el.classList.toggle("text-streaming", part.state === "streaming");
      return;
    }
    const details = el.querySelector(":scope > details");
    // While the model still writes the input: the placeholder only, nothing answerable.
    details.hidden = updatePreparing(el, part, toolNameOf(part));
    if (details.hidden) return;
    const widget = widgets.for(part.toolCallId, toolNameOf(part));
    const [label, tone] = this.toolStatus(part, widget !== null);
    details.dataset.state = part.state || "";
    const badge = details.querySelector(".badge");
    badge.textContent = label;
    badge.className = `badge badge-${tone}`;
    const body = details.querySelector(".tool-body");
    const content = [];
    if (part.input !== undefined) content.push(h("div", { class: "tool-label", text: "Input" }), h("pre", { class: "json", "data-field": "input", text: pretty(part.input) }));
    if (part.state === "output-available") content.push(h("div", { class: "tool-label", text: "Output" }), h("pre", { class: "json", "data-field": "output", text: pretty(part.output) }));
    if (part.state === "output-error") content.push(h("div", { class: "tool-label", text: "Error" }), h("pre", { class: "json", "data-field": "error", text: String(part.errorText) }));
    const signature = JSON.stringify([part.state, part.input, part.output, part.errorText]);
    if (body.dataset.signature !== signature) {
      body.dataset.signature = signature;
      body.replaceChildren(...content);
    }
    if (widget) {
      widget.update();
      if (widget.root.parentElement !== el) el.append(widget.root);
    }
  },

  toolStatus(part, parked) {
    switch (part.state) {
      case "input-streaming":
        return ["preparing", "run"];
      case "input-available":
        return parked ? ["waiting for you", "wait"] : ["running", "run"];
      case "approval-requested":
        return ["needs approval", "wait"];
      case "approval-responded":
        return [part.approval && part.approval.approved ? "approved" : "denied", "wait"];
      case "output-available":
        return ["done", "ok"];
      case "output-error":
        return ["error", "bad"];
      case "output-denied":
        return ["denied", "bad"];
      default:
        return [part.state || "unknown", "run"];
    }
  },
};

// -- 8. boot ---------------------------------------------------------------------------

function boot() {
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
