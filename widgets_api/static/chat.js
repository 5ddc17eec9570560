// Parkway playground: the chat controller. It holds the chat's messages and the
// server's view of its calls, sends turns and answers (POST /api/chat), reads the
// stream, catches up with GET /api/chats/{id} (reload, another tab, the server) and
// polls pending calls. It draws through page.view (set at boot), so view.js can
// import it without a cycle.
//
// An ES module imported by playground.js and view.js; no build step.

import { agentPanel } from "/static/agent-panel.js";
import { page } from "/static/page-context.js";
import { api, errorMessage, newId, sameOrigin } from "/static/playground-base.js";
import { isResolved, isToolPart, lastStep, readChunks, StreamRun, toolNameOf } from "/static/ui-stream.js";
import { widgets } from "/static/widgets.js";

const PENDING_POLL_MS = 2000;

function callPath(chatId, toolCallId) {
  return `/api/chats/${encodeURIComponent(chatId)}/calls/${encodeURIComponent(toolCallId)}`;
}

export const chat = {
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
    page.view.status(status);
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
      page.view.banner(turn.error);
      return false;
    }
    if (!this.id) {
      this.id = newId("chat");
      const url = new URL(window.location.href);
      url.searchParams.set("chat", this.id);
      window.history.replaceState(null, "", url.pathname + url.search);
      page.view.chatId(this.id);
    }
    // A new message supersedes the calls still pending: the server cancels them.
    this.answers.clear();
    this.messages.push({ id: newId("u"), role: "user", parts: [{ type: "text", text }] });
    page.view.render();
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
    page.view.render();
    this.continueIfReady();
  },

  /** Someone else settled the call first: show their outcome, then catch up. */
  winner(toolCallId, outcome) {
    const callView = this.calls.get(toolCallId) || { toolCallId };
    this.calls.set(toolCallId, { ...callView, status: "settled", outcome });
    this.answers.delete(toolCallId);
    widgets.noteLost(toolCallId);
    page.view.render();
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
    page.view.banner(null);
    for (const id of sent) this.inflight.add(id);
    page.view.render();
    let response;
    try {
      response = await api.fetch("/api/chat", { method: "POST", body });
    } catch (error) {
      this.inflight.clear();
      this.setStatus("error");
      page.view.banner(`Could not reach the server: ${error.message}`);
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
      else page.view.banner(text);
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
        page.view.schedule();
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
    page.view.render();
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
        page.view.banner(`Could not reach the server: ${error.message}`);
        return;
      }
      if (result.status === 404) {
        if (!this.messages.length) page.view.banner("This chat does not exist, or it belongs to another session.");
        return;
      }
      if (!result.ok) {
        page.view.banner(errorMessage(result.data, result.status));
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
    page.view.render();
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
              page.view.render();
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
