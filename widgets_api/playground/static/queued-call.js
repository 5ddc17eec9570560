// Parkway playground: one call opened from the approvals queue, as its card's host.
//
// A widget (widget.js) draws a call of a Chat (chat.js): it asks its host for the call's
// context, and hands it answers, which a Chat sends in its next POST /api/chat. An
// approver has no chat to post to: the chat stays its owner's (docs/security.md,
// "Approvals by others"). A QueuedCall stands in for that Chat with the few members a
// widget uses, reads the call with GET on its statusUrl, and sends each answer through
// the settle route (POST on the same URL). A conflict (the requester's other approver,
// or the deadline, won: 409) shows the winner's outcome on the card.
//
// An ES module imported by approvals-view.js; no build step.

import { errorMessage, sameOrigin } from "./playground-base.js";
import { widgetClassFor } from "./widgets.js";

function callPath(chatId, toolCallId) {
  return `api/chats/${encodeURIComponent(chatId)}/calls/${encodeURIComponent(toolCallId)}`;
}

/** Who won the call before this page's answer, in words. */
function winnerText(outcome) {
  const how = outcome.outcome;
  if (how === "timeout") return "Too late: the request timed out before your answer.";
  if (how === "cancelled") return "Too late: the request was cancelled before your answer (its chat moved on).";
  const who = outcome.by ? ` by ${outcome.by}` : "";
  return `Someone else answered first: ${how}${who}. Your answer was not recorded.`;
}

/** One approval from GET /api/approvals (`item`), opened. `api`: the API client;
 *  `panel`: the agent panel (a code review shows the build kit's permissions);
 *  `onSettled(item)`: the call is no longer pending (answered here or elsewhere). */
export class QueuedCall {
  constructor(item, { api, panel, onSettled }) {
    this.item = item;
    this.api = api;
    this.panel = panel;
    this.onSettled = onSettled;
    this.id = item.chatId; // the chat id, as a widget reads it from its Chat
    this.view = null; // the call view (GET or POST on the statusUrl)
    this.pending = null; // {intent} while an answer is on its way
    this.inflight = new Set();
    this.followsRuns = false; // the run that follows is the requester's, not shown here
    this.widget = null;
  }

  get statusUrl() {
    const widget = this.item.widget || {};
    return sameOrigin(widget.statusUrl) || callPath(this.item.chatId, this.item.toolCallId);
  }

  /** Read the call and make its card. Returns null, or the error to show instead. */
  async open() {
    let result;
    try {
      result = await this.api.json(this.statusUrl);
    } catch (error) {
      return `Could not reach the server: ${error.message}`;
    }
    if (result.status === 404) {
      this.onSettled(this.item);
      return "This approval is no longer waiting for you: it was answered, timed out or its chat ended.";
    }
    if (!result.ok || !result.data) return errorMessage(result.data, result.status);
    this.view = result.data;
    const Kind = widgetClassFor(this.view.widget || this.item.widget || { callKind: "approval" });
    this.widget = new Kind(this.item.toolCallId, this);
    this.widget.update();
    if (this.view.status === "settled") this.onSettled(this.item);
    return null;
  }

  // -- what a widget asks of its host (chat.js has the same members) --------------------

  callContext(toolCallId) {
    const view = this.view || {};
    const desc = view.widget || this.item.widget || {};
    return {
      id: toolCallId,
      part: null,
      view: this.view,
      desc,
      toolName: desc.tool || view.toolName || this.item.toolName,
      input: view.input !== undefined ? view.input : this.item.input,
      statusUrl: this.statusUrl,
      answer: this.pending,
      outcome: view.status === "settled" ? view.outcome || null : null,
    };
  }

  /** This page is an approver's: it may answer what the queue lists. */
  leftToOthers() {
    return false;
  }

  busy() {
    return this.pending !== null;
  }

  /** An answer from the card (ApprovalWidget's approve or deny): settle it. One already
   *  settled through the statusUrl (an edited input) brings its call view. */
  answer(toolCallId, patch, { intent, settled = false, view = null } = {}) {
    if (settled) {
      this.settled(view);
      return;
    }
    const body = { outcome: intent === "approved" ? "approved" : "denied" };
    const reason = patch.approval && patch.approval.reason;
    if (body.outcome === "denied" && reason) body.reason = reason;
    this.pending = { intent };
    this.widget.settle(body).then((callView) => {
      this.pending = null;
      if (callView) this.settled(callView);
      else this.widget.update(); // an error (shown on the card) or a lost race
    });
  }

  /** Someone else settled the call first (409): show their outcome, and say so. */
  winner(toolCallId, outcome) {
    this.view = { ...(this.view || {}), status: "settled", outcome };
    this.widget.lost = true;
    this.widget.notice = winnerText(outcome);
    this.onSettled(this.item);
  }

  settled(callView) {
    if (callView) this.view = callView;
    this.widget.update();
    this.onSettled(this.item);
  }

  redraw() {
    if (this.widget) this.widget.update();
  }
}
