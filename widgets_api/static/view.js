// Parkway playground: the view. It renders the chat's messages into the page, keyed
// so that elements (and what is typed into widgets) survive updates: text and
// reasoning parts, tool calls with their input and output, and each parked call's
// widget card. Model text goes in through textContent only.
//
// An ES module imported by playground.js; no build step.

import { chat } from "/static/chat.js";
import { messageFooter, reasoningElement, updatePreparing, updateReasoning } from "/static/message-extras.js";
import { h, pretty } from "/static/playground-base.js";
import { isToolPart, toolNameOf } from "/static/ui-stream.js";
import { widgets } from "/static/widgets.js";

export const view = {
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
