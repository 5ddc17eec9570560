// Parkway playground: the widget base class. Every parked call gets one card (a
// Widget subclass, chosen by widgets.js); this class holds what they share: the
// `data-state` test hook, redraw only on change, the ended and queued cards, and
// settling through the call's statusUrl.
//
// An ES module imported by the widget modules; no build step.

import { page } from "/static/page-context.js";
import { api, errorMessage, h } from "/static/playground-base.js";

/** A widget: one card per parked call, keyed by toolCallId. `state(ctx)` names what it
 *  shows (the `data-state` test hook); `draw(ctx, state)` builds it. It is redrawn only
 *  when what it shows changes, so text typed into it survives updates. */
export class Widget {
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
    return page.chat.callContext(this.id);
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
    return page.chat.inflight.has(this.id) || page.chat.busy() ? "submitting" : "queued";
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
        page.chat.winner(this.id, outcome);
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
