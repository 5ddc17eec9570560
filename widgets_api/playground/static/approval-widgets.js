// Parkway playground: the approval widgets. ApprovalWidget: Approve or Deny a call
// (with an edited input where the descriptor allows edits). CommitApprovalWidget: the
// same for an agent change (commit_config), drawn as its summary and a line diff.
//
// An ES module imported by widgets.js; no build step.

import { applyPatch, diffView } from "./commit-diff.js";
import { canonical, errorMessage, h, pretty } from "./playground-base.js";
import { Widget } from "./widget.js";

// An MCP tool's annotations, as its card words them (the server's claims, not checked).
const MCP_HINTS = {
  readOnlyHint: "only reads",
  destructiveHint: "may destroy data",
  idempotentHint: "safe to repeat",
  openWorldHint: "reaches outside systems",
};

export class ApprovalWidget extends Widget {
  /** `kind`: the card's `data-kind` (a subclass drawing another descriptor kind names it). */
  constructor(id, chat, kind = "approval") {
    super(id, kind, chat);
    this.editor = h("textarea", { id: `edit-${id}`, "data-field": "input", spellcheck: "false", rows: 6 });
    this.reason = h("input", { type: "text", id: `reason-${id}`, "data-field": "reason", placeholder: "Optional" });
  }

  /** What is approved, in the card's title: "Approve x?", then "Approved: x". */
  subject(ctx) {
    return ctx.toolName;
  }

  question(ctx) {
    return `Approve ${this.subject(ctx)}?`;
  }

  title(ctx) {
    const state = this.state(ctx);
    if (state === "awaiting") return `Waiting for an approver: ${this.subject(ctx)}`;
    if (state === "approved") return `Approved: ${this.subject(ctx)}`;
    if (state === "denied") return `Denied: ${this.subject(ctx)}`;
    if (state === "ended") return `Not run: ${this.subject(ctx)}`;
    return this.question(ctx);
  }

  userLine(ctx) {
    return `The agent wants to run ${ctx.toolName}. Check what will run, then approve or deny.`;
  }

  chip(ctx, state) {
    if (state === "approved" && ctx.part && ctx.part.state === "output-error") return ["failed", "bad"];
    return super.chip(ctx, state);
  }

  /** `awaiting`: pending, but left to someone else (an approver), and this page is its
   *  requester's (the host says so: chat.js `leftToOthers`). */
  state(ctx) {
    const state = this.localState(ctx) || this.endedState(ctx) || "pending";
    return state === "pending" && this.chat.leftToOthers(ctx) ? "awaiting" : state;
  }

  /** " by <principal>" when someone else decided it (an approver): the outcome's `by`. */
  decidedBy(ctx) {
    const by = ctx.outcome && ctx.outcome.by;
    return by && !this.answeredHere() ? ` by ${by}` : "";
  }

  approvalId(ctx) {
    return (ctx.part && ctx.part.approval && ctx.part.approval.id) || ctx.desc.approvalId || (ctx.view && ctx.view.approvalId);
  }

  draw(ctx, state) {
    if (state === "approved") {
      const edited = ctx.outcome && ctx.outcome.input !== undefined;
      const part = ctx.part;
      const ran = part && part.state === "output-available" ? pretty(part.output) : null;
      const failed = part && part.state === "output-error" ? part.errorText : null;
      return [
        this.head(ctx, "Approved"),
        h("p", { class: "widget-result widget-result-ok", "data-testid": "approved-line", text: `Approved${edited ? " with edits" : ""}${this.decidedBy(ctx)} ✓` }),
        ...(edited ? this.labelled("Approved input", pretty(ctx.outcome.input)) : []),
        ...(ran !== null ? this.labelled("Result", ran) : []),
        failed ? h("p", { class: "widget-error", text: `The tool failed: ${failed}` }) : null,
        ...this.messages(),
      ];
    }
    if (state === "denied") {
      const reason = ctx.outcome && ctx.outcome.reason;
      const denied = `Denied${this.decidedBy(ctx)}`;
      return [
        this.head(ctx, "Denied"),
        h("p", { class: "widget-result widget-result-bad", "data-testid": "denied-line", text: reason ? `${denied}: ${reason}` : denied }),
        ...this.messages(),
      ];
    }
    if (state === "ended") return this.endedCard(ctx, state);
    if (state === "awaiting") return this.awaitingCard(ctx);
    if (state === "submitting" || state === "queued") {
      const approved = ctx.answer && ctx.answer.intent === "approved";
      return [this.head(ctx, approved ? "Approving" : "Denying"), this.queuedCard(ctx, state), ...this.messages()];
    }
    const allowEdits = ctx.desc.allowEdits === true;
    if (allowEdits && !this.editor.dataset.touched) this.editor.value = pretty(ctx.input ?? {});
    this.editor.oninput = () => {
      this.editor.dataset.touched = "1";
    };
    return [
      this.head(ctx, "Approval"),
      this.description(ctx),
      this.mcpNote(ctx),
      h("div", { class: "tool-label", text: "What will run" }),
      allowEdits
        ? h("label", { class: "widget-field", for: this.editor.id }, "Input (you may edit it before approving)", this.editor)
        : h("pre", { class: "json", "aria-label": "Input", text: pretty(ctx.input) }),
      ...this.decision(ctx),
    ];
  }

  /** An MCP tool's card: its server and tool, and what the server says of the tool, as
   *  its hints (descriptor `mcp`; nobody verified them). */
  mcpNote(ctx) {
    const mcp = ctx.desc && ctx.desc.mcp;
    if (!mcp) return null;
    const said = Object.entries(mcp.hints || {})
      .filter(([name, on]) => on === true && MCP_HINTS[name])
      .map(([name]) => MCP_HINTS[name]);
    const hints = said.length ? `the server says it ${said.join(", ")} (unverified)` : "the server gives no hints about it";
    return h("p", { class: "widget-mcp", "data-testid": "mcp-line", text: `MCP server ${mcp.server}, tool ${mcp.tool}: ${hints}` });
  }

  /** The requester's card of an approval left to someone else: what will run, who
   *  decides, no buttons (the server would refuse this page's answer). */
  awaitingCard(ctx) {
    const role = ctx.desc.approvers || (ctx.view && ctx.view.approvers) || "approver";
    return [
      this.head(ctx, "Approval"),
      h("p", { class: "widget-desc", "data-testid": "awaiting-approver", text: `Someone with the “${role}” role decides this, not you. The chat goes on once they answer.` }),
      h("div", { class: "tool-label", text: "What will run" }),
      h("pre", { class: "json", "aria-label": "Input", text: pretty(ctx.input) }),
      h("div", { class: "widget-actions" }, this.deadline(ctx)),
      ...this.messages(),
    ];
  }

  /** A JSON block under its label. */
  labelled(label, text) {
    const field = label.toLowerCase().replace(/ /g, "-");
    return [h("div", { class: "tool-label", text: label }), h("pre", { class: "json", "aria-label": label, "data-field": field, text })];
  }

  /** The reason field, Approve and Deny, the deadline and any messages. */
  decision(ctx) {
    return [
      h("label", { class: "widget-field", for: this.reason.id }, "Reason (optional, sent with a denial)", this.reason),
      h(
        "div",
        { class: "widget-actions" },
        h("button", { type: "button", class: "button button-primary", "data-action": "approve", disabled: this.busy, onclick: () => this.approve() }, "Approve"),
        h("button", { type: "button", class: "button button-danger", "data-action": "deny", disabled: this.busy, onclick: () => this.deny() }, "Deny"),
        ...this.extraActions(ctx),
        this.deadline(ctx),
      ),
      ...this.messages(),
    ];
  }

  /** More buttons beside Approve and Deny (a subclass's Edit). */
  extraActions() {
    return [];
  }

  /** The input as the person edited it, or undefined when they did not edit it. Throws
   *  an Error whose message the card shows. */
  editedInput() {
    try {
      const edited = JSON.parse(this.editor.value);
      canonical(edited); // throws for what the server refuses too (1e400, a lone surrogate)
      return edited;
    } catch (error) {
      throw new Error(`The input is not valid JSON: ${error.message}`);
    }
  }

  async approve() {
    const ctx = this.ctx();
    const approval = { id: this.approvalId(ctx), approved: true };
    if (ctx.desc.allowEdits === true) {
      let edited;
      try {
        edited = this.editedInput(ctx);
      } catch (error) {
        this.error = error.message;
        this.update();
        return;
      }
      if (edited !== undefined && canonical(edited) !== canonical(ctx.input ?? {})) {
        // The AI SDK's approval response cannot carry an edited input, so the edit is
        // settled through the call's statusUrl; the chat POST then resumes the run.
        const callView = await this.settle({ outcome: "approved", input: edited });
        if (!callView) return;
        this.answer({ state: "approval-responded", approval }, { intent: "approved", settled: true, view: callView });
        return;
      }
    }
    this.error = "";
    this.answer({ state: "approval-responded", approval }, { intent: "approved" });
  }

  deny() {
    const ctx = this.ctx();
    const approval = { id: this.approvalId(ctx), approved: false };
    const reason = this.reason.value.trim();
    if (reason) approval.reason = reason;
    this.error = "";
    this.answer({ state: "approval-responded", approval }, { intent: "denied" });
  }
}

/** The descriptor kind `agent_change` (the agent asks to change its own template).
 *  The card shows the summary and a line diff of the committed head against what the
 *  server would commit (runner/agent/commits.py `apply_patch`, mirrored by commit-diff.js
 *  `applyPatch`). */
export class CommitApprovalWidget extends ApprovalWidget {
  constructor(id, chat) {
    super(id, chat);
    this.committed = null; // {version, template}: the head the diff is drawn against
    this.committedError = "";
    this.fetching = false;
  }

  subject() {
    return "change to the agent";
  }

  question() {
    return "Approve this change to the agent?";
  }

  userLine() {
    return "The agent wants to change its own template. Check the change, then approve or deny.";
  }

  drawKey(ctx, state) {
    return [...super.drawKey(ctx, state), this.committed && this.committed.version, this.committedError];
  }

  draw(ctx, state) {
    if (state !== "pending" || ctx.desc.allowEdits === true) return super.draw(ctx, state);
    if (!this.committed && !this.committedError && !this.fetching) this.fetchCommitted();
    const input = ctx.input && typeof ctx.input === "object" ? ctx.input : {};
    const summary = typeof input.summary === "string" ? input.summary : "";
    let diff;
    if (this.committedError) {
      diff = h("p", { class: "widget-error", text: this.committedError });
    } else if (!this.committed) {
      diff = h("p", { class: "widget-result widget-result-neutral", text: "Loading the current template…" });
    } else {
      try {
        diff = diffView(this.committed.template, applyPatch(this.committed.template, input));
      } catch (error) {
        diff = h("p", { class: "widget-error", "data-testid": "commit-diff-error", text: `The patch cannot be applied: ${error.message}` });
      }
    }
    return [
      this.head(ctx, "Agent change"),
      summary ? h("p", { class: "commit-summary", "data-testid": "commit-summary-text", text: summary }) : null,
      h("div", { class: "tool-label", text: this.committed ? `Changes to version ${this.committed.version}` : "Changes" }),
      diff,
      h("details", { class: "commit-raw" }, h("summary", {}, "The call's input"), h("pre", { class: "json", "aria-label": "Input", text: pretty(ctx.input) })),
      ...this.decision(ctx),
    ];
  }

  /** The committed head, read once: the diff shows the change against what is live. */
  async fetchCommitted() {
    this.fetching = true;
    try {
      const result = await this.chat.api.json("api/agent");
      if (result.ok && result.data && result.data.template && typeof result.data.template === "object") {
        this.committed = { version: result.data.version, template: result.data.template };
      } else {
        this.committedError = `The current template could not be read: ${errorMessage(result.data, result.status)}`;
      }
    } catch (error) {
      this.committedError = `Could not reach the server: ${error.message}`;
    } finally {
      this.fetching = false;
    }
    this.update();
  }
}
