// Parkway playground: the widget base class. Every parked call gets one card (a
// Widget subclass, chosen by widgets.js); this class holds what they share: the
// `data-state` test hook, redraw only on change, the tool chip drawn from the card's
// state, the ended and queued cards, "answered in another tab", and settling through
// the call's statusUrl.
//
// An ES module imported by the widget modules; no build step.

import { chipFor, PERSON_OUTCOMES } from "./call-outcome.js";
import { errorMessage, h } from "./playground-base.js";

/** Card states in which the call waits for the person at this page. */
export const WAITING = new Set(["pending", "connecting"]);
const ANSWERED_ELSEWHERE = "Answered in another tab.";
const LOST_RACE = "Answered in another tab first: that answer is shown, not yours.";

/** A widget: one card per parked call, keyed by toolCallId. `state(ctx)` names what it
 *  shows (the `data-state` test hook); `draw(ctx, state)` builds it. It is redrawn only
 *  when what it shows changes, so text typed into it survives updates. `chat` is the
 *  Chat (chat.js) the call belongs to. */
export class Widget {
  constructor(id, kind, chat) {
    this.id = id;
    this.kind = kind;
    this.chat = chat;
    this.error = "";
    this.errorShown = "";
    this.notice = "";
    this.busy = false;
    this.drawn = null;
    this.sawWaiting = false; // this page showed the call waiting for an answer
    this.acted = false; // the person at this page answered it (or started to)
    this.lost = false; // ... but another tab's answer won
    this.root = h("section", { class: "widget", "data-testid": `widget-${id}`, "data-kind": kind });
  }

  ctx() {
    return this.chat.callContext(this.id);
  }

  update() {
    const ctx = this.ctx();
    const state = this.state(ctx);
    this.noteElsewhere(ctx, state);
    this.root.dataset.state = state;
    this.root.dataset.tool = ctx.toolName;
    const key = JSON.stringify([state, this.error, this.notice, this.busy, this.drawKey(ctx, state)]);
    if (key === this.drawn) return;
    this.drawn = key;
    this.root.setAttribute("aria-label", `${this.title(ctx)}`);
    this.root.replaceChildren(...this.draw(ctx, state).filter(Boolean));
    this.revealError();
  }

  /** A call this page showed waiting, answered by a person, but not here: say where the
   *  answer came from rather than show it as if it were this page's. */
  noteElsewhere(ctx, state) {
    if (WAITING.has(state)) {
      this.sawWaiting = true;
      return;
    }
    const outcome = ctx.outcome;
    // An approval decided by someone else names them itself (`by`): no "another tab".
    const other = outcome && outcome.by;
    if (this.sawWaiting && !this.acted && !this.notice && !other && outcome && PERSON_OUTCOMES.has(outcome.outcome)) {
      this.notice = ANSWERED_ELSEWHERE;
    }
  }

  /** A new error goes below the card's buttons, which may be at the bottom edge of the
   *  chat (under the composer): bring it into view. */
  revealError() {
    if (this.error && this.error !== this.errorShown) {
      const el = this.root.querySelector('[data-testid="widget-error"]');
      if (el) window.requestAnimationFrame(() => el.scrollIntoView({ block: "nearest" }));
    }
    this.errorShown = this.error;
  }

  /** Another tab answered first: its answer is shown, and the card says so. */
  noteLost() {
    this.lost = true;
    this.notice = LOST_RACE;
  }

  /** Whether the answer shown is this page's own. */
  answeredHere() {
    return this.acted && !this.lost;
  }

  /** Whether the call waits for the person at this page. */
  waitsForUser() {
    return this.root.isConnected && WAITING.has(this.root.dataset.state);
  }

  /** The tool chip's [label, tone], from the card's state: the chip and the card say
   *  the same thing. */
  chip(ctx, state) {
    return chipFor(state);
  }

  drawKey(ctx) {
    return [ctx.outcome, ctx.part && ctx.part.state, ctx.part && ctx.part.output, ctx.part && ctx.part.errorText];
  }

  title(ctx) {
    return ctx.toolName;
  }

  /** The card's line for the person (never the tool's description, which is written
   *  for the model), or null. */
  userLine() {
    return null;
  }

  /** Answer the call in its tool part (chat.answer), as this page's answer. */
  answer(patch, options) {
    this.acted = true;
    this.chat.answer(this.id, patch, options);
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
    return this.chat.inflight.has(this.id) || this.chat.busy() ? "submitting" : "queued";
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
    const line = this.userLine(ctx);
    return line ? h("p", { class: "widget-desc", "data-testid": "widget-line", text: line }) : null;
  }

  messages() {
    return [
      this.notice ? h("p", { class: "widget-hint", "data-testid": "widget-notice", text: this.notice }) : null,
      this.error ? h("p", { class: "widget-error", role: "alert", "data-testid": "widget-error", text: this.error }) : null,
    ];
  }

  deadline(ctx) {
    const ms = ctx.desc.deadline;
    if (typeof ms !== "number") return null;
    // The page's one time format (the Decisions list has it too): "4:17 PM".
    const time = new Date(ms).toLocaleTimeString([], { timeStyle: "short" });
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
    this.acted = true;
    this.busy = true;
    this.error = "";
    this.update();
    try {
      const result = await this.chat.api.json(url, { method: "POST", body });
      if (result.ok) return result.data;
      const outcome = result.data && result.data.error ? result.data.error.outcome : null;
      if (result.status === 409 && outcome) {
        this.chat.winner(this.id, outcome);
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
