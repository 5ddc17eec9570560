// Parkway playground: a live question (the `data-parkway-live-input` part,
// runner/engine/live.py). A running tool call waits for the person's answer, for a
// bounded time: an older MCP server asked a form question in the middle of its tool.
// The card shows the server's message and form (mcp-form.js), checks the answer, and
// posts it to POST api/chats/{chat}/calls/{call}/live/{liveId}. The part is put again
// when the wait ends: answered (by this page or another) or expired, and the card says
// so. Nothing here is durable: a question whose wait is over cannot be answered.
//
// The message and schema are the MCP server's: untrusted text, put on the page as text.
//
// An ES module imported by view.js; no build step.

import { h } from "./playground-base.js";
import { ElicitationForm } from "./mcp-form.js";

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

const SAID = { accept: "Answer sent ✓", decline: "Declined.", cancel: "Cancelled." };

export class LiveQuestionCard {
  constructor(chat, data) {
    this.chat = chat;
    this.data = data;
    this.liveId = String(data.liveId);
    this.form = new ElicitationForm(`live-${this.liveId}`, isObject(data.requestedSchema) ? data.requestedSchema : {});
    this.root = h("section", { class: "widget live-question", "data-testid": `live-${this.liveId}`, "data-kind": "live-question" });
    this.busy = false;
    this.sent = null; // the action this page sent and the server recorded
    this.error = "";
    this.signature = "";
    this.timer = null;
  }

  /** The part's latest data (the same question, maybe closed). */
  update(data) {
    this.data = data;
    this.draw();
  }

  state() {
    if (this.data.state === "answered" || this.data.state === "expired") return this.data.state;
    if (this.sent) return "answered";
    if (typeof this.data.deadline === "number" && Date.now() >= this.data.deadline) return "expired";
    return "open";
  }

  secondsLeft() {
    return typeof this.data.deadline === "number" ? Math.max(0, Math.ceil((this.data.deadline - Date.now()) / 1000)) : null;
  }

  draw() {
    const state = this.state();
    const signature = JSON.stringify([state, this.busy, this.error, this.sent, this.data.action]);
    this.root.dataset.state = state;
    this.tick(state);
    if (signature === this.signature) return;
    this.signature = signature;
    const asker = isObject(this.data.asker) ? this.data.asker : {};
    const server = typeof asker.server === "string" && asker.server ? asker.server : "An MCP server";
    const tool = typeof asker.tool === "string" && asker.tool ? asker.tool : "?";
    const title = `${server} asks while its tool ${tool} runs`;
    this.root.setAttribute("aria-label", title);
    const head = h("div", { class: "widget-head" }, h("h3", { class: "widget-title", text: title }), h("span", { class: "widget-kind", text: state === "open" ? "Waiting for you" : state === "answered" ? "Answered" : "Ended" }));
    const message = h("p", { class: "mcp-message", text: typeof this.data.message === "string" ? this.data.message : "" });
    if (state === "answered") {
      const action = this.sent || this.data.action;
      const line = this.sent ? SAID[action] || "Answer sent ✓" : "Answered ✓";
      this.root.replaceChildren(head, message, h("p", { class: "widget-result widget-result-ok", "data-testid": "live-result", text: line }));
      return;
    }
    if (state === "expired") {
      const line = "The wait ended without your answer: the server was told it was cancelled, and the tool went on.";
      this.root.replaceChildren(head, message, h("p", { class: "widget-result widget-result-neutral", "data-testid": "live-result", text: line }));
      return;
    }
    const left = h("span", { class: "deadline", "data-testid": "live-deadline" });
    const form = h(
      "form",
      { class: "mcp-form", novalidate: true, "aria-label": title, onsubmit: (event) => { event.preventDefault(); if (!this.busy) this.accept(); } },  // prettier-ignore
      ...this.form.elements(),
      h(
        "div",
        { class: "widget-actions" },
        h("button", { type: "submit", class: "button button-primary", "data-action": "send", disabled: this.busy }, "Send"),
        h("button", { type: "button", class: "button", "data-action": "decline", disabled: this.busy, onclick: () => this.answer({ action: "decline" }) }, "Decline"),
        h("button", { type: "button", class: "button", "data-action": "cancel", disabled: this.busy, onclick: () => this.answer({ action: "cancel" }) }, "Cancel"),
        left,
      ),
    );
    const line = h("p", { class: "widget-desc", text: `The tool waits for your answer, for a limited time. Answer, decline (an explicit no) or cancel.` });
    const error = this.error ? h("p", { class: "widget-error", role: "alert", "data-testid": "live-error", text: this.error }) : null;
    this.root.replaceChildren(...[head, message, line, form, error].filter(Boolean));
    this.drawLeft();
  }

  drawLeft() {
    const el = this.root.querySelector("[data-testid=live-deadline]");
    const left = this.secondsLeft();
    if (el && left !== null) el.textContent = `${left} s left`;
  }

  /** While open, count down each second; redraw once the deadline passes. */
  tick(state) {
    if (state !== "open") {
      if (this.timer) window.clearInterval(this.timer);
      this.timer = null;
      return;
    }
    if (this.timer) return;
    this.timer = window.setInterval(() => {
      if (!this.root.isConnected || this.state() !== "open") {
        window.clearInterval(this.timer);
        this.timer = null;
        this.draw();
        return;
      }
      this.drawLeft();
    }, 1000);
  }

  accept() {
    const { content, invalid } = this.form.check();
    if (invalid.length) {
      invalid[0].focus();
      return;
    }
    this.answer({ action: "accept", content });
  }

  async answer(body) {
    this.busy = true;
    this.error = "";
    this.draw();
    const chatId = encodeURIComponent(this.chat.id);
    const callId = encodeURIComponent(String(this.data.toolCallId));
    const url = `api/chats/${chatId}/calls/${callId}/live/${encodeURIComponent(this.liveId)}`;
    let result;
    try {
      result = await this.chat.api.json(url, { method: "POST", body });
    } catch {
      result = { ok: false, status: 0, data: null };
    }
    this.busy = false;
    if (result.ok) this.sent = body.action;
    else if (result.status === 409) this.data = { ...this.data, state: "expired" };
    else {
      const reason = result.data && result.data.error && result.data.error.message;
      this.error = reason ? `Not sent: ${reason}` : "Not sent: the server could not be reached. Try again.";
    }
    this.draw();
  }
}

/** The live questions of a message's parts, by their tool call: toolCallId -> [data]. */
export function liveQuestionsOf(message) {
  const found = new Map();
  for (const part of message.parts || []) {
    if (part.type !== "data-parkway-live-input" || !isObject(part.data) || typeof part.data.liveId !== "string") continue;
    const callId = String(part.data.toolCallId);
    if (!found.has(callId)) found.set(callId, []);
    found.get(callId).push(part.data);
  }
  return found;
}
