// Parkway playground: the widget registry. It makes one widget per parked call, chosen
// by the descriptor's `kind` alone (never by the tool's name), keeps the live ones, and
// passes the chat's news to them (errors, lost races).
//
// An ES module imported by chat.js; no build step.

import { ApprovalWidget, CommitApprovalWidget } from "./approval-widgets.js";
import { PERSON_OUTCOMES, sameAnswer } from "./call-outcome.js";
import { ChoiceWidget, ClientWidget, UnsupportedWidget } from "./client-widgets.js";
import { CodeReviewWidget, LibraryChangeWidget } from "./code-widgets.js";
import { ConnectWidget } from "./connect-widget.js";
import { McpInputWidget } from "./mcp-widgets.js";

/** The descriptor kinds this page has a widget for (widgets_api/descriptors.py). */
const WIDGETS_BY_KIND = {
  approval: ApprovalWidget,
  agent_change: CommitApprovalWidget,
  code: CodeReviewWidget,
  library_change: LibraryChangeWidget,
  connect: ConnectWidget,
  choice: ChoiceWidget,
  client: ClientWidget,
  "mcp-form": McpInputWidget,
  "mcp-url": McpInputWidget,
};

/** The kinds only an approval is drawn as: a client tool naming one (its `render`) has
 *  no answer such a card could give. */
const APPROVAL_KINDS = new Set(["approval", "agent_change", "code", "library_change"]);

/** The widget class for a descriptor, by kind; an approval of a kind this page does
 *  not know is still an approval (its input shown as JSON); any other unknown kind, or
 *  a client call of an approval's kind, is unsupported. The approvals view
 *  (approvals-view.js) draws its cards with it too. */
export function widgetClassFor(desc) {
  const approval = desc.callKind === "approval";
  const kind = typeof desc.kind === "string" ? desc.kind : approval ? "approval" : "client";
  if (desc.callKind === "client" && APPROVAL_KINDS.has(kind)) return UnsupportedWidget;
  if (Object.hasOwn(WIDGETS_BY_KIND, kind)) return WIDGETS_BY_KIND[kind];
  return approval ? ApprovalWidget : UnsupportedWidget;
}

/** The widgets of one chat's parked calls. `chat`: the Chat (chat.js). */
export class WidgetRegistry {
  constructor(chat) {
    this.chat = chat;
    this.live = new Map();
  }

  /** The widget of a parked call (made once per toolCallId), or null for a call that
   *  was never parked. */
  for(toolCallId) {
    const existing = this.live.get(toolCallId);
    if (existing) return existing;
    const desc = this.chat.descriptors.get(toolCallId) || (this.chat.calls.get(toolCallId) || {}).widget;
    if (!desc) return null;
    const Kind = widgetClassFor(desc);
    const widget = new Kind(toolCallId, this.chat);
    this.live.set(toolCallId, widget);
    return widget;
  }

  /** The widgets on the page whose calls wait for the person at it. */
  waiting() {
    return [...this.live.values()].filter((widget) => widget.waitsForUser());
  }

  pollsItself(toolCallId) {
    const widget = this.live.get(toolCallId);
    return widget ? widget.pollsItself() : false;
  }

  fail(toolCallId, text) {
    const widget = this.live.get(toolCallId);
    if (widget) widget.error = text;
  }

  noteLost(toolCallId) {
    const widget = this.live.get(toolCallId);
    if (widget) widget.noteLost();
  }

  /** After a POST: an answer the server refused as a lost race, or whose call holds
   *  another person's answer than this tab's, lost to another tab; say so. (A call the
   *  server ended meanwhile says so on its own card.) */
  checkAnswers(answers, { refused }) {
    for (const [id, answer] of answers || []) {
      if (!answer) continue;
      const outcome = this.chat.callContext(id).outcome;
      if (!outcome || !PERSON_OUTCOMES.has(outcome.outcome)) continue;
      if ((refused && !answer.settled) || !sameAnswer(answer, outcome)) this.noteLost(id);
    }
    this.chat.redraw();
  }

  /** Drop the widgets whose calls left the chat. */
  prune() {
    for (const [id, widget] of this.live) {
      if (!widget.root.isConnected && !this.chat.findToolPart(id)) {
        widget.dispose();
        this.live.delete(id);
      }
    }
  }
}
