// Parkway playground: the widget registry. It makes one widget per parked call (by
// the descriptor's kind, then the tool's name), keeps the live ones, and passes the
// chat's news to them (errors, lost races).
//
// An ES module imported by chat.js and view.js; no build step.

import { ApprovalWidget, CommitApprovalWidget } from "/static/approval-widgets.js";
import { ChoiceWidget, ClientWidget, UnsupportedWidget } from "/static/client-widgets.js";
import { ConnectWidget } from "/static/connect-widget.js";
import { page } from "/static/page-context.js";

/** Widget dispatch: by the descriptor's kind, then by tool name, then the generic
 *  client widget for a client tool with no render kind; anything else is unsupported. */
const WIDGETS_BY_KIND = { approval: ApprovalWidget, connect: ConnectWidget, choice: ChoiceWidget, client: ClientWidget };
const WIDGETS_BY_TOOL = { choose_option: ChoiceWidget, request_connection: ConnectWidget };

export const widgets = {
  live: new Map(),

  classFor(desc, toolName) {
    if (desc.callKind === "approval") return (desc.tool || toolName) === "commit_config" ? CommitApprovalWidget : ApprovalWidget;
    const kind = typeof desc.kind === "string" ? desc.kind : "client";
    if (Object.hasOwn(WIDGETS_BY_KIND, kind)) return WIDGETS_BY_KIND[kind];
    if (Object.hasOwn(WIDGETS_BY_TOOL, toolName)) return WIDGETS_BY_TOOL[toolName];
    return UnsupportedWidget;
  },

  /** The widget of a parked call (made once per toolCallId), or null for a call that
   *  was never parked. */
  for(toolCallId, toolName) {
    const existing = this.live.get(toolCallId);
    if (existing) return existing;
    const desc = page.chat.descriptors.get(toolCallId) || (page.chat.calls.get(toolCallId) || {}).widget;
    if (!desc) return null;
    const Kind = this.classFor(desc, toolName);
    const widget = new Kind(toolCallId);
    this.live.set(toolCallId, widget);
    return widget;
  },

  pollsItself(toolCallId) {
    const widget = this.live.get(toolCallId);
    return widget ? widget.pollsItself() : false;
  },

  fail(toolCallId, text) {
    const widget = this.live.get(toolCallId);
    if (widget) widget.error = text;
  },

  noteLost(toolCallId) {
    const widget = this.live.get(toolCallId);
    if (widget) widget.notice = "Someone else answered this first; their answer is shown.";
  },

  /** After a POST: where the server's outcome is not what this tab answered, say so. */
  checkIntents(intents) {
    for (const [id, intent] of intents) {
      if (!intent) continue;
      const outcome = page.chat.callContext(id).outcome;
      if (outcome && outcome.outcome !== intent) this.noteLost(id);
    }
    page.view.render();
  },
};
