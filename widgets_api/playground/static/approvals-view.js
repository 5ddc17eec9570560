// Parkway playground: the Approvals view, for approvers. An approval whose policy leaves
// it to someone other than the requester (docs/security.md, "Approvals by others") is
// listed by GET /api/approvals for whoever may answer it, across chats, newest first, a
// page at a time. This view lists them (tool, requester, chat, when, deadline, a short
// input preview), pages on with the cursor ("More"), opens one as the same card its
// requester's chat would draw (queued-call.js hosts it), and answers it through the
// settle route. An answered (or no longer pending) approval leaves the list.
//
// The topbar's Approvals button shows only while the queue has something (or the view
// is open): a page with nothing to approve, which is most pages, never sees it. The
// queue is read when the page loads and when it comes back into view; once it has
// listed something (this principal is an approver), it is read again every few seconds.
//
// An ES module imported by playground.js; no build step.

import { errorMessage, h } from "./playground-base.js";
import { QueuedCall } from "./queued-call.js";

const PAGE = 20;
const POLL_MS = 5000;
const PREVIEW_CHARS = 120;

function shortTime(ms) {
  // The page's one time format (cards and the Decisions list): "4:17 PM".
  const when = new Date(ms);
  return h("time", { datetime: when.toISOString(), text: when.toLocaleTimeString([], { timeStyle: "short" }) });
}

/** The input as one line of JSON, cut to a preview. */
function preview(input) {
  let text;
  try {
    text = JSON.stringify(input) ?? "";
  } catch {
    text = String(input);
  }
  return text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS - 1)}…` : text;
}

function keyOf(item) {
  return `${item.chatId} ${item.toolCallId}`;
}

/** The view. `doc`: the page's document; `api`: the API client; `panel`: the agent
 *  panel (code reviews show its build kit's permissions). */
export class ApprovalsView {
  constructor(doc, { api, panel }) {
    this.api = api;
    this.panel = panel;
    this.app = doc.getElementById("app");
    this.root = doc.getElementById("approvals");
    this.toggle = doc.getElementById("toggle-approvals");
    this.count = doc.getElementById("approvals-count");
    this.items = []; // pending approvals listed, newest first
    this.next = null; // the cursor of the page after the ones read
    this.opened = null; // the QueuedCall shown below the list
    this.error = "";
    this.approver = false; // the queue listed something once: poll it
    this.loading = false;
    this.seq = 0;
  }

  start() {
    const e = (this.els = {});
    e.heading = h("h2", { class: "panel-title", id: "approvals-title", tabindex: "-1", text: "Approvals waiting for you" });
    e.refresh = h("button", { type: "button", class: "button button-quiet button-small", "data-action": "refresh-approvals", onclick: () => this.reload() }, "Refresh");
    e.close = h("button", { type: "button", class: "button button-quiet button-small", "data-action": "close-approvals", onclick: () => this.close() }, "Back to the chat");
    e.error = h("p", { class: "panel-error", role: "alert", "data-testid": "approvals-error", hidden: true });
    e.empty = h("p", { class: "panel-note", "data-testid": "approvals-empty", hidden: true, text: "Nothing is waiting for you." });
    e.list = h("ol", { class: "approvals-list", "data-testid": "approvals-list", "aria-labelledby": "approvals-title" });
    e.more = h("button", { type: "button", class: "button button-small", "data-action": "more-approvals", "aria-label": "Show more approvals", hidden: true, onclick: () => this.more() }, "More");
    e.detail = h("div", { class: "approvals-detail", "data-testid": "approval-detail", "aria-live": "polite" });
    this.root.replaceChildren(
      h("div", { class: "panel-head" }, e.heading, h("div", { class: "approvals-actions" }, e.refresh, e.close)),
      h("p", { class: "panel-note", text: "Requests from other people's chats that you may approve or deny. Open one to see what would run." }),
      e.error,
      e.empty,
      e.list,
      e.more,
      e.detail,
    );
    this.toggle.addEventListener("click", () => (this.isOpen() ? this.close() : this.open()));
    this.root.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !event.target.closest("input, textarea")) this.close();
    });
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible") this.reload();
    });
    window.setInterval(() => {
      if (this.approver && document.visibilityState === "visible" && !this.loading) this.reload();
    }, POLL_MS);
    this.reload();
  }

  isOpen() {
    return !this.root.hidden;
  }

  open() {
    this.root.hidden = false;
    this.app.dataset.view = "approvals";
    this.toggle.setAttribute("aria-expanded", "true");
    this.draw();
    this.els.heading.focus();
    this.reload();
  }

  close() {
    this.root.hidden = true;
    delete this.app.dataset.view;
    this.toggle.setAttribute("aria-expanded", "false");
    this.draw();
    if (this.toggle.hidden) document.getElementById("composer").focus();
    else this.toggle.focus();
  }

  // -- reading the queue --------------------------------------------------------------

  /** Read the first page again (as many items as are listed, at least a page). */
  async reload() {
    const seq = ++this.seq;
    this.loading = true;
    const limit = Math.min(100, Math.max(PAGE, this.items.length));
    const result = await this.read(`api/approvals?limit=${limit}`);
    this.loading = false;
    if (seq !== this.seq) return; // a later read answers instead
    if (result.error) {
      // A background read that fails stays quiet; the open view says so.
      this.error = this.isOpen() ? result.error : "";
    } else {
      this.error = "";
      this.items = result.approvals;
      this.next = result.next;
      if (this.items.length) this.approver = true;
    }
    this.draw();
  }

  /** The next page, after the last one read. */
  async more() {
    if (!this.next) return;
    const seq = ++this.seq;
    this.els.more.disabled = true;
    const result = await this.read(`api/approvals?limit=${PAGE}&after=${encodeURIComponent(this.next)}`);
    this.els.more.disabled = false;
    if (seq !== this.seq) return;
    if (result.error) {
      this.error = result.error;
    } else {
      const known = new Set(this.items.map(keyOf));
      this.items.push(...result.approvals.filter((item) => !known.has(keyOf(item))));
      this.next = result.next;
      this.error = "";
    }
    this.draw();
  }

  async read(path) {
    let result;
    try {
      result = await this.api.json(path);
    } catch (error) {
      return { error: `Could not reach the server: ${error.message}` };
    }
    const data = result.data;
    if (!result.ok || !data || !Array.isArray(data.approvals)) return { error: errorMessage(data, result.status) };
    return { approvals: data.approvals, next: typeof data.next === "string" ? data.next : null };
  }

  // -- drawing ------------------------------------------------------------------------

  draw() {
    const e = this.els;
    const n = this.items.length;
    // Out of the way for a page with nothing to approve; kept while the view is open.
    this.toggle.hidden = n === 0 && !this.isOpen();
    this.count.textContent = n ? String(n) + (this.next ? "+" : "") : "";
    this.toggle.setAttribute("aria-label", n ? `Approvals: ${n}${this.next ? " or more" : ""} waiting for you` : "Approvals");
    e.error.hidden = !this.error;
    e.error.textContent = this.error;
    e.empty.hidden = n > 0 || Boolean(this.error);
    e.more.hidden = !this.next;
    const existing = new Map([...e.list.children].map((li) => [li.dataset.key, li]));
    const wanted = this.items.map((item) => existing.get(keyOf(item)) || this.itemElement(item));
    for (const li of wanted) li.classList.toggle("approval-item-open", Boolean(this.opened && keyOf(this.opened.item) === li.dataset.key));
    e.list.replaceChildren(...wanted);
  }

  itemElement(item) {
    const who = item.requestedBy || "someone";
    const facts = [h("span", {}, "requested ", shortTime(item.createdAt))];
    if (typeof item.deadline === "number") facts.push(h("span", {}, "expires ", shortTime(item.deadline)));
    return h(
      "li",
      { class: "approval-item", "data-testid": "approval-item", "data-key": keyOf(item), "data-chat": item.chatId, "data-call": item.toolCallId },
      h(
        "div",
        { class: "approval-item-head" },
        h("span", { class: "approval-tool", text: item.toolName }),
        h("span", { class: "approval-who", "data-field": "requested-by", text: `from ${who}` }),
        h(
          "button",
          { type: "button", class: "button button-small", "data-action": "open-approval", "aria-label": `Review ${item.toolName} requested by ${who}`, onclick: () => this.show(item) },
          "Review",
        ),
      ),
      h("div", { class: "approval-facts" }, h("span", {}, "chat ", h("code", { "data-field": "chat", text: item.chatId })), ...facts),
      h("code", { class: "approval-preview", "data-field": "preview", text: preview(item.input) }),
    );
  }

  /** Open an approval below the list, as its card. */
  async show(item) {
    const opened = new QueuedCall(item, { api: this.api, panel: this.panel, onSettled: (done) => this.drop(done) });
    this.opened = opened;
    const e = this.els;
    const title = h("h3", { class: "approvals-detail-title", tabindex: "-1", text: `${item.toolName} in chat ${item.chatId}, from ${item.requestedBy || "someone"}` });
    e.detail.replaceChildren(title, h("p", { class: "panel-note", text: "Loading the call…" }));
    this.draw();
    const problem = await opened.open();
    if (this.opened !== opened) return; // another one was opened meanwhile
    if (problem) {
      e.detail.replaceChildren(title, h("p", { class: "panel-error", role: "alert", "data-testid": "approval-open-error", text: problem }));
    } else {
      e.detail.replaceChildren(title, opened.widget.root);
    }
    title.scrollIntoView({ block: "nearest" });
    title.focus();
  }

  /** An approval that is no longer pending leaves the list (its card stays open). */
  drop(item) {
    const key = keyOf(item);
    this.items = this.items.filter((other) => keyOf(other) !== key);
    this.draw();
  }
}
