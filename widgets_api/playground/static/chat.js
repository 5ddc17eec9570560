// Parkway playground: the chat controller. A Chat holds the chat's messages and the
// server's view of its calls, sends turns and answers (POST /api/chat), reads the
// stream, catches up with GET /api/chats/{id} (reload, another tab, the server) and
// polls pending calls. It owns the widgets of its calls (widgets.js) and draws through
// its view (view.js), which playground.js gives it at boot.
//
// An ES module imported by playground.js; no build step.

import { codeCallsOf } from "./code-view.js";
import { outcomeOf } from "./call-outcome.js";
import { errorMessage, newId, sameOrigin } from "./playground-base.js";
import { isResolved, isToolPart, lastStep, readChunks, StreamRun, toolNameOf } from "./ui-stream.js";
import { WidgetRegistry } from "./widgets.js";

const PENDING_POLL_MS = 2000;
// Refusals that are lost races, not errors: another tab or the server answered first,
// or a run holds the chat. The widgets show the winner's outcome after the sync.
const RACED = ["already_settled", "chat_busy", "nothing_to_resume", "no_pending_call_answered"];
const COUNT = new Intl.NumberFormat("en");
const NO_ANSWER = "This message has no answer: its last attempt ended before the agent replied.";

function callPath(chatId, toolCallId) {
  return `api/chats/${encodeURIComponent(chatId)}/calls/${encodeURIComponent(toolCallId)}`;
}

/** Why a new message was not sent, in plain words; the message stays in the composer. */
function refusalText(refusal, text) {
  const kept = "Your message was not sent; it is still in the box below.";
  switch (refusal.code) {
    case "message_too_large": {
      const limit = /(\d+) characters/.exec(refusal.text);
      const most = limit ? ` (at most ${COUNT.format(Number(limit[1]))} characters; yours has ${COUNT.format(text.length)})` : "";
      return `Your message is too long to send${most}. Shorten it and send it again: it is still in the box below.`;
    }
    case "body_too_large":
      return "Your message, with the chat so far, is too large to send. Shorten it, or start a new chat: it is still in the box below.";
    case "chat_busy":
      return `The agent is still working on this chat. ${kept}`;
    default:
      return `${refusal.text} ${kept}`;
  }
}

export class Chat {
  /** `api`: the API client (playground-base.js); `panel`: the agent panel, which gives
   *  each new turn its template and hears of committed revisions. */
  constructor({ api, panel }) {
    this.api = api;
    this.panel = panel;
    this.view = null; // the View drawing this chat (view.js), set at boot
    this.decisions = null; // the chat's Decisions list (view.js), set at boot
    this.widgets = new WidgetRegistry(this);
    this.id = null;
    this.messages = [];
    this.calls = new Map(); // toolCallId -> the server's call view (GET chat, statusUrl)
    this.descriptors = new Map(); // toolCallId -> widget descriptor (data-parkway-widget part)
    this.answers = new Map(); // toolCallId -> {patch, intent, settled}: answered here, not yet sent
    this.inflight = new Set(); // toolCallIds whose answers the current POST carries
    this.messageErrors = new Map(); // messageId -> the error that ended its stream
    this.failed = null; // the id of the message showing the last turn's error (Retry), or null
    this.codeCalls = new Map(); // toolCallId -> the tool calls its code made (ui-stream.js)
    this.serverState = null; // 'idle' | 'running' | 'parked', from the last GET
    this.loaded = false; // the chat was loaded from the server once (a reload)
    this.status = "ready"; // 'ready' | 'submitted' | 'streaming' | 'error'
    this.abort = null;
    this.refusedContinue = null;
    this.syncPromise = null;
    this.syncAgain = false;
    this.polling = new Set();
  }

  busy() {
    return this.status === "submitted" || this.status === "streaming";
  }

  setStatus(status) {
    this.status = status;
    this.view.status(status);
  }

  /** Redraw the chat (widgets call this after they change what the chat holds). */
  redraw() {
    this.view.render();
  }

  /** Make `id` this page's chat, in the address bar too (a reload comes back to it). */
  adopt(id) {
    this.id = id;
    const url = new URL(window.location.href);
    url.searchParams.set("chat", id);
    window.history.replaceState(null, "", url.pathname + url.search);
    this.view.chatId(id);
  }

  /** Take back a chat id the server never made one for (its first message was refused). */
  forget() {
    this.id = null;
    const url = new URL(window.location.href);
    url.searchParams.delete("chat");
    window.history.replaceState(null, "", url.pathname + url.search);
    this.view.chatId(null);
  }

  lastAssistant() {
    const last = this.messages.at(-1);
    return last && last.role === "assistant" ? last : null;
  }

  findToolPart(toolCallId) {
    for (let m = this.messages.length - 1; m >= 0; m -= 1) {
      const parts = this.messages[m].parts || [];
      for (let i = parts.length - 1; i >= 0; i -= 1) {
        if (isToolPart(parts[i]) && parts[i].toolCallId === toolCallId) return parts[i];
      }
    }
    return null;
  }

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
      outcome: outcomeOf(part, callView, desc, this.answers.has(toolCallId)),
    };
  }

  /** Whether the call is an approval its policy leaves to someone else, so this page
   *  (the requester's) cannot answer it: its descriptor (or call view) says
   *  `selfApproval: false` (docs/security.md, "Approvals by others"). */
  leftToOthers(ctx) {
    return ctx.desc.selfApproval === false || Boolean(ctx.view && ctx.view.selfApproval === false);
  }

  /** A `data-committed-revision` part: tell the agent panel. */
  committedRevision(data) {
    this.panel.committed(data);
  }

  // -- sending ------------------------------------------------------------------------

  /** Start a turn with the user's message. Returns false when it was not sent (the
   *  banner says why; the message is taken back out of the chat, and a chat the server
   *  never made leaves the address bar). */
  async send(text) {
    if (this.busy()) return false;
    this.setStatus("submitted");
    const turn = await this.panel.forTurn();
    if (turn.error) {
      this.setStatus("ready");
      this.view.banner(turn.error);
      return false;
    }
    const fresh = !this.id;
    if (fresh) this.adopt(newId("chat"));
    // A new message supersedes the calls still pending: the server cancels them (the
    // composer asked the user first).
    const queued = new Map(this.answers);
    this.answers.clear();
    const message = { id: newId("u"), role: "user", parts: [{ type: "text", text }] };
    this.failed = null;
    this.messages.push(message);
    this.view.render();
    const body = { id: this.id, messages: this.messages, trigger: "submit-message" };
    // The build kit over the working template, or uncommitted edits: this turn only.
    if (turn.template !== undefined) body.agentTemplate = turn.template;
    const result = await this.post(body, []);
    if (result.ok && !this.lost(message)) return true;
    if (result.ok) {
      // The turn failed before the server stored the message (an internal error): it is
      // not in the chat, so it goes back in the box, with the error.
      const error = this.messageErrors.get(message.id);
      this.messageErrors.delete(message.id);
      if (this.failed === message.id) this.failed = null;
      this.view.banner(`${error || "The run failed."} Your message was not kept; it is back in the box below.`);
      this.view.render();
      return false;
    }
    this.messages = this.messages.filter((m) => m !== message);
    this.answers = queued;
    if (fresh) this.forget();
    this.view.banner(refusalText(result, text));
    this.view.render();
    if (!fresh) await this.sync();
    return false;
  }

  /** Whether the turn of the user's `message` failed (its error is shown under it) and
   *  the server's chat, read after it, does not have the message. */
  lost(message) {
    return this.messageErrors.has(message.id) && !this.messages.some((m) => m.id === message.id);
  }

  /** Run the last turn again after it failed: resend its user message with the same id
   *  (as the AI SDK's `regenerate()` does). The server kept the message and runs the
   *  model again without storing it twice. */
  async retry() {
    if (this.busy() || !this.id || !this.failed) return;
    const index = this.messages.findLastIndex((m) => m.role === "user");
    if (index < 0) return;
    const failed = this.failed;
    this.setStatus("submitted");
    const turn = await this.panel.forTurn();
    if (turn.error) {
      this.setStatus("ready");
      this.view.banner(turn.error);
      return;
    }
    this.failed = null;
    const body = { id: this.id, messages: this.messages.slice(0, index + 1), trigger: "regenerate-message" };
    if (turn.template !== undefined) body.agentTemplate = turn.template;
    const result = await this.post(body, []);
    if (result.ok) return;
    // Still not answered: the error under the message says why, and Retry stays.
    this.failed = failed;
    this.messageErrors.set(failed, result.text);
    this.setStatus("error");
    await this.sync();
  }

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
    this.view.render();
    this.continueIfReady();
  }

  /** Someone else settled the call first: show their outcome, then catch up. */
  winner(toolCallId, outcome) {
    const callView = this.calls.get(toolCallId) || { toolCallId };
    this.calls.set(toolCallId, { ...callView, status: "settled", outcome });
    this.answers.delete(toolCallId);
    this.widgets.noteLost(toolCallId);
    this.view.render();
    this.sync();
  }

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
    this.postAnswers(body, mine, key);
  }

  /** Send answers; a refusal is shown on the answered cards (or lost races noted). */
  async postAnswers(body, sent, key) {
    const result = await this.post(body, sent, key);
    if (result.ok) return;
    const raced = RACED.includes(result.code);
    if (!raced) {
      if (sent.length) for (const id of sent) this.widgets.fail(id, result.text);
      else this.view.banner(result.text);
    }
    await this.sync();
    this.widgets.checkAnswers(result.answers, { refused: raced });
  }

  /** POST /api/chat and read the answer. Returns {ok: true}, or {ok: false, code, text,
   *  answers} when the server refused it or could not be reached (`code` null). */
  async post(body, sent, key = null) {
    this.setStatus("submitted");
    this.view.banner(null);
    for (const id of sent) this.inflight.add(id);
    this.view.render();
    const answers = new Map(sent.map((id) => [id, this.answers.get(id)]));
    let response;
    try {
      response = await this.api.fetch("api/chat", { method: "POST", body });
    } catch (error) {
      this.inflight.clear();
      for (const id of sent) this.answers.delete(id);
      this.setStatus("error");
      return { ok: false, code: null, text: `Could not reach the server: ${error.message}`, answers };
    }
    this.inflight.clear();
    for (const id of sent) this.answers.delete(id);
    if (response.ok) {
      this.refusedContinue = null;
      if (response.status === 200) await this.consume(response, { replay: false });
      else this.setStatus("ready"); // 202: answers recorded, other calls still pending
      await this.sync();
      this.widgets.checkAnswers(answers, { refused: false });
      return { ok: true };
    }
    const data = await response.json().catch(() => null);
    this.setStatus("ready");
    if (key) this.refusedContinue = key;
    return { ok: false, code: data && data.error ? data.error.code : "", text: errorMessage(data, response.status), answers };
  }

  async consume(response, { replay }) {
    this.setStatus("streaming");
    const controller = new AbortController();
    this.abort = controller;
    const run = new StreamRun(this, { replay });
    try {
      for await (const chunk of readChunks(response)) {
        if (controller.signal.aborted) break;
        run.apply(chunk);
        this.view.schedule();
        if (run.error) break;
      }
    } catch (error) {
      run.error = run.error || `The stream was interrupted (${error.message}).`;
    }
    this.abort = null;
    if (run.message) {
      for (const part of run.message.parts) if (part.state === "streaming") part.state = "done";
      if (run.error) this.failTurn(run.message, run.error);
      else this.messageErrors.delete(run.message.id);
      // A turn whose own stream broke off went on: following it shows its answer.
      if (!run.error && replay && this.failed) {
        this.messageErrors.delete(this.failed);
        this.failed = null;
      }
    }
    this.setStatus(run.error ? "error" : "ready");
    this.view.render();
  }

  /** A turn's stream ended with an error: show it under what the model said, or under
   *  the user's message when it said nothing (the server keeps that message, so a
   *  reload shows it too), with Retry. */
  failTurn(message, error) {
    let anchor = message;
    if (!message.parts.some((p) => p.type === "text" || p.type === "reasoning" || isToolPart(p))) {
      const index = this.messages.indexOf(message);
      const user = this.messages.slice(0, index < 0 ? undefined : index).findLast((m) => m.role === "user");
      if (user) {
        this.messages = this.messages.filter((m) => m !== message);
        anchor = user;
      }
    }
    this.messageErrors.set(anchor.id, error);
    this.failed = anchor.id;
  }

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
  }

  async runSync({ follow = true } = {}) {
    let again = true;
    let mayFollow = follow;
    while (again) {
      again = false;
      this.syncAgain = false;
      if (this.busy()) return; // the stream's own end syncs
      let result;
      try {
        result = await this.api.json(`api/chats/${encodeURIComponent(this.id)}`);
      } catch (error) {
        this.view.banner(`Could not reach the server: ${error.message}`);
        return;
      }
      if (result.status === 404) {
        if (!this.messages.length) this.view.banner("This chat does not exist, or it belongs to another session.");
        return;
      }
      if (!result.ok) {
        this.view.banner(errorMessage(result.data, result.status));
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
  }

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
    for (const [id, made] of codeCallsOf(this.messages)) this.codeCalls.set(id, made);
    // An idle chat that ends with the user's message: its turn failed (or was stopped)
    // before the model said anything, maybe before this page was loaded. Offer Retry.
    const last = this.messages.at(-1);
    if (data.state === "idle" && last && last.role === "user") {
      if (!this.messageErrors.has(last.id)) this.messageErrors.set(last.id, NO_ANSWER);
      this.failed = last.id;
    }
    if (this.decisions) this.decisions.refresh(this.id); // a settle, a reload: who decided
    // Answers given here and not sent yet survive a sync while their call is pending.
    for (const [id, answer] of [...this.answers]) {
      const callView = this.calls.get(id);
      if (callView && callView.status === "settled" && !answer.settled) {
        this.answers.delete(id);
        this.widgets.noteLost(id);
        continue;
      }
      const part = this.findToolPart(id);
      if (part) Object.assign(part, answer.patch);
    }
    this.view.render();
    if (!this.loaded) this.view.revealWaiting(); // the page's first look at the chat
    this.loaded = true;
  }

  /** GET /api/chat/{id}/stream: the current message from its start, then live. */
  async follow() {
    let response;
    try {
      response = await this.api.fetch(`api/chat/${encodeURIComponent(this.id)}/stream`);
    } catch {
      return;
    }
    if (response.status !== 200) return;
    await this.consume(response, { replay: true });
  }

  async stop() {
    if (!this.id) return;
    await this.api.fetch(`api/chats/${encodeURIComponent(this.id)}/stop`, { method: "POST" }).catch(() => null);
  }

  /** Every ~2 s, ask each pending call's statusUrl whether someone else settled it. */
  startPolling() {
    window.setInterval(async () => {
      if (this.busy() || !this.id) return;
      for (const callView of this.calls.values()) {
        const id = callView.toolCallId;
        if (callView.status !== "pending" || this.answers.has(id) || this.polling.has(id)) continue;
        if (this.widgets.pollsItself(id)) continue;
        const url = this.callContext(id).statusUrl;
        if (!url) continue;
        this.polling.add(id);
        this.api
          .json(url)
          .then((result) => {
            if (result.ok && result.data && result.data.status === "settled") {
              this.calls.set(id, result.data);
              this.view.render();
              this.sync();
            }
          })
          .catch(() => null)
          .finally(() => this.polling.delete(id));
      }
      if (this.serverState === "running") this.sync();
    }, PENDING_POLL_MS);
  }
}
