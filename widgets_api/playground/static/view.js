// Parkway playground: the view. A View renders one chat's messages into the page, keyed
// so that elements (and what is typed into widgets) survive updates: text and
// reasoning parts, tool calls with their input and output (drawn by shape: an artifact
// reference with its download link, a code run's result, else JSON), each parked
// call's widget card, and the tool calls a program made under its call. The status
// pill says "Waiting for you" while a card waits for an answer. Model text goes in
// through textContent only. A DecisionsList draws the chat's "Decisions" list from its
// audit trail.
//
// An ES module imported by playground.js; no build step.

import { brokeredView, outputView } from "./code-view.js";
import { LiveQuestionCard, liveQuestionsOf } from "./live-question.js";
import { messageFooter, reasoningElement, updatePreparing, updateReasoning } from "./message-extras.js";
import { h, pretty } from "./playground-base.js";
import { isToolPart, toolNameOf } from "./ui-stream.js";

const STATUS_LABELS = { ready: "Ready", waiting: "Waiting for you", submitted: "Sending…", streaming: "Streaming…", error: "Error" };
const ELEMENT_IDS = ["messages", "scroller", "empty", "composer", "composer-form", "send", "stop", "banner", "banner-text", "banner-close", "chat-status", "chat-id", "new-chat"];

/** The tool chip of a call that has no card (a server tool, or one still running). */
function toolStatus(part) {
  switch (part.state) {
    case "input-streaming":
      return ["preparing", "run"];
    case "input-available":
      return ["running", "run"];
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
}

export class View {
  /** `doc`: the page's document; `chat`: the Chat (chat.js) it shows. */
  constructor(doc, chat) {
    this.chat = chat;
    this.widgets = chat.widgets;
    // liveId -> LiveQuestionCard (live-question.js), built once; the questions of the
    // message being drawn, by their tool call
    this.liveCards = new Map();
    this.liveNow = new Map();
    this.pending = false;
    this.chatStatus = "ready";
    this.els = {};
    for (const id of ELEMENT_IDS) this.els[id] = doc.getElementById(id);
    // A chat scrolled to its end stays there when its area shrinks (the Decisions list
    // appearing below it, a narrow screen's keyboard): the buttons of a card at the end
    // would otherwise slip below the fold.
    const scroller = this.els.scroller;
    this.atEnd = true;
    scroller.addEventListener("scroll", () => {
      this.atEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
    });
    new ResizeObserver(() => {
      if (this.atEnd) scroller.scrollTop = scroller.scrollHeight;
    }).observe(scroller);
  }

  /** Bring the first card waiting for the user into view, down to its buttons (a
   *  reload at a waiting card, on a small screen too). */
  revealWaiting() {
    const [first] = this.widgets.waiting();
    if (first) first.root.scrollIntoView({ block: "end" });
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    window.requestAnimationFrame(() => {
      this.pending = false;
      this.render();
    });
  }

  /** The chat's status ('ready' | 'submitted' | 'streaming' | 'error'). */
  status(status) {
    this.chatStatus = status;
    this.drawStatus();
  }

  /** The pill: the chat's status, or "Waiting for you" while it is ready and a card
   *  waits for an answer (nothing happens until the person answers). */
  drawStatus() {
    const status = this.chatStatus;
    const shown = status === "ready" && this.widgets.waiting().length ? "waiting" : status;
    const el = this.els["chat-status"];
    el.dataset.status = shown;
    el.textContent = STATUS_LABELS[shown];
    const busy = status === "submitted" || status === "streaming";
    this.els.send.disabled = busy;
    this.els.stop.hidden = !busy;
  }

  chatId(id) {
    this.els["chat-id"].textContent = id || "";
  }

  banner(text) {
    this.els.banner.hidden = !text;
    this.els["banner-text"].textContent = text || "";
  }

  render() {
    const chat = this.chat;
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
    this.widgets.prune();
    this.drawStatus();
    if (atBottom) scroller.scrollTop = scroller.scrollHeight;
  }

  renderParts(li, message) {
    this.liveNow = liveQuestionsOf(message);
    const shown = (message.parts || []).filter((p) => p.type === "text" || p.type === "reasoning" || isToolPart(p));
    const items = shown.map((part, index) => {
      const key = isToolPart(part) ? `tool:${part.toolCallId}` : `${part.type}:${index}`;
      let el = [...li.children].find((child) => child.dataset.key === key);
      if (!el) el = this.partElement(part, key);
      this.updatePart(el, part);
      return el;
    });
    const error = this.chat.messageErrors.get(message.id);
    if (error) {
      let el = [...li.children].find((child) => child.dataset.key === "error");
      if (!el) el = h("div", { class: "message-error", role: "alert", "data-key": "error", "data-testid": "message-error" });
      el.textContent = error;
      items.push(el);
    }
    // The last turn failed and this is where it shows: it can be run again.
    if (error && this.chat.failed === message.id && this.chat.messages.at(-1) === message) {
      let el = [...li.children].find((child) => child.dataset.key === "retry");
      if (!el) {
        el = h(
          "div",
          { class: "message-retry", "data-key": "retry" },
          h("button", { type: "button", class: "button button-small", "data-action": "retry", "data-testid": "retry", text: "Retry", onclick: () => this.chat.retry() }),
        );
      }
      el.querySelector("button").disabled = this.chat.busy();
      items.push(el);
    }
    const footer = messageFooter([...li.children].find((child) => child.dataset.key === "footer"), message);
    if (footer) items.push(footer);
    items.forEach((el, index) => {
      if (li.children[index] !== el) li.insertBefore(el, li.children[index] || null);
    });
    while (li.children.length > items.length) li.lastElementChild.remove();
  }

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
  }

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
    const widget = this.widgets.for(part.toolCallId);
    // A parked call's chip is drawn from its card's state, so the two always agree.
    if (widget) widget.update();
    const [label, tone] = widget ? widget.chip(widget.ctx(), widget.root.dataset.state) : toolStatus(part);
    details.dataset.state = part.state || "";
    const badge = details.querySelector(".badge");
    badge.textContent = label;
    badge.className = `badge badge-${tone}`;
    const body = details.querySelector(".tool-body");
    // The input a person edited before approving (the part keeps the model's).
    const outcome = widget ? widget.ctx().outcome : null;
    const edited = outcome && outcome.input !== undefined ? outcome.input : undefined;
    details.dataset.edited = String(edited !== undefined);
    const content = [];
    if (part.input !== undefined) content.push(h("div", { class: "tool-label", text: "Input" }), h("pre", { class: "json", "data-field": "input", text: pretty(part.input) }));
    if (edited !== undefined) content.push(h("div", { class: "tool-label", text: "Approved input (edited)" }), h("pre", { class: "json", "data-field": "approved-input", text: pretty(edited) }));
    if (part.state === "output-available") content.push(h("div", { class: "tool-label", text: "Output" }), outputView(part.output, this.chat.id));
    if (part.state === "output-error") content.push(h("div", { class: "tool-label", text: "Error" }), h("pre", { class: "json", "data-field": "error", text: String(part.errorText) }));
    const signature = JSON.stringify([part.state, part.input, part.output, part.errorText, edited]);
    if (body.dataset.signature !== signature) {
      body.dataset.signature = signature;
      body.replaceChildren(...content);
    }
    if (widget && widget.root.parentElement !== el) el.append(widget.root);
    this.updateLive(el, part.toolCallId);
    this.updateBrokered(el, part.toolCallId);
  }

  /** The questions a running call put to the person (live-question.js), under it. */
  updateLive(el, toolCallId) {
    for (const data of this.liveNow.get(toolCallId) || []) {
      let card = this.liveCards.get(data.liveId);
      if (!card) {
        card = new LiveQuestionCard(this.chat, data);
        this.liveCards.set(data.liveId, card);
      }
      card.update(data);
      if (card.root.parentElement !== el) el.append(card.root);
    }
  }

  /** The tool calls a program made, listed under its call (after its card). */
  updateBrokered(el, toolCallId) {
    const calls = this.chat.codeCalls.get(toolCallId);
    let list = el.querySelector(":scope > .code-tool-calls");
    const signature = calls && calls.length ? JSON.stringify(calls) : "";
    if (list && list.dataset.signature === signature) {
      if (list !== el.lastElementChild) el.append(list);
      return;
    }
    if (list) list.remove();
    if (!signature) return;
    list = brokeredView(calls);
    list.dataset.signature = signature;
    el.append(list);
  }
}

/** One line of the Decisions list: who (the viewer's own decisions say "you"; a timeout
 *  has no principal), the outcome, the tool, where it came from and when. */
function decisionItem(entry) {
  const who = entry.byYou ? "you" : entry.principal || "server";
  const when = new Date(entry.at);
  const outcome = entry.edits ? `${entry.outcome} (edited)` : entry.outcome;
  return h(
    "li",
    { class: "decision", "data-testid": "decision", "data-call": entry.toolCallId, "data-outcome": entry.outcome, "data-source": entry.source, "data-who": who },
    h("span", { class: "decision-who", text: who }),
    h("span", { class: "decision-outcome", text: outcome }),
    h("span", { class: "decision-tool", text: entry.toolName }),
    h("span", { class: "decision-source", text: `via ${entry.source}` }),
    // The page's one time format (a card's deadline has it too): "4:17 PM".
    h("time", { class: "decision-time", datetime: when.toISOString(), text: when.toLocaleTimeString([], { timeStyle: "short" }) }),
  );
}

/** The chat's "Decisions" list (GET /api/chats/{id}/audit): who settled which call, how,
 *  from where and when. The chat refreshes it each time it loads the chat again (a
 *  reload, and the sync that follows every settle); it is hidden while there is none. */
export class DecisionsList {
  /** `api`: the API client; `doc`: the page's document. */
  constructor(api, doc) {
    this.api = api;
    this.root = doc.getElementById("decisions");
    this.list = doc.getElementById("decisions-list");
    this.count = doc.getElementById("decisions-count");
    this.generation = 0;
    this.signature = "";
  }

  async refresh(chatId) {
    const generation = ++this.generation;
    let entries = [];
    if (chatId) {
      let result;
      try {
        result = await this.api.json(`api/chats/${encodeURIComponent(chatId)}/audit?limit=50`);
      } catch {
        return; // the server is unreachable: the chat's own banner says so
      }
      if (result.ok && result.data && Array.isArray(result.data.entries)) entries = result.data.entries;
    }
    if (generation !== this.generation) return; // a later refresh answers instead
    const signature = JSON.stringify(entries.map((e) => [e.id, e.byYou]));
    if (signature === this.signature) return;
    this.signature = signature;
    this.root.hidden = entries.length === 0;
    this.count.textContent = entries.length ? String(entries.length) : "";
    this.list.replaceChildren(...entries.map(decisionItem));
  }
}
