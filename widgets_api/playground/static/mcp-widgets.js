// Parkway playground: the widget of an MCP server's request for input (descriptor kinds
// "mcp-form" and "mcp-url", runner/mcp/input.py). One section per request:
//
// - a form (mode "form") is built from the requested schema (mcp-form.js), checked
//   here before anything is sent, then shown for review ("Review answer", then "Send"
//   or "Edit");
// - a link (mode "url") names the host it leads to, opens it in a popup, and is
//   accepted when the person says they finished.
//
// The answer is the call's output, {"responses": {<key>: {"action": "accept",
// "content"?: {...}}}}. "Decline" (an explicit no) and "Cancel" (dismissed without a
// choice) answer every request of the call: the call is settled "declined" or
// "cancelled", and the server is told decline or cancel for each request. In a call
// with several requests, "Decline this one" and "Cancel this one" answer one request
// so, alone; the others are answered as usual.
//
// The messages, hosts and schemas are the MCP server's: untrusted text, always put on
// the page as text.
//
// An ES module imported by widgets.js; no build step.

import { h } from "./playground-base.js";
import { ClientWidget } from "./client-widgets.js";
import { ElicitationForm } from "./mcp-form.js";

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** A link the page may open: http(s) only (the server checks this too). */
function webUrl(value) {
  try {
    const url = new URL(String(value));
    return url.protocol === "https:" || url.protocol === "http:" ? url : null;
  } catch {
    return null;
  }
}

export class McpInputWidget extends ClientWidget {
  constructor(id, chat) {
    super(id, chat);
    this.kind = "mcp-input";
    this.root.dataset.kind = "mcp-input";
    this.mode = "edit"; // "edit" | "review"
    this.forms = new Map(); // request key -> ElicitationForm, built once
    this.opened = new Set(); // link requests whose page this tab opened
    this.content = {}; // request key -> checked content, in review
    this.skipped = new Map(); // request key -> "decline" | "cancel": one request of several answered so, alone
  }

  render(ctx) {
    return (ctx.desc && isObject(ctx.desc.render) && ctx.desc.render) || {};
  }

  requests(ctx) {
    const requests = this.render(ctx).requests;
    return isObject(requests) ? Object.entries(requests).filter(([, req]) => isObject(req)) : [];
  }

  title(ctx) {
    const server = this.render(ctx).server;
    return `${typeof server === "string" && server ? server : "An MCP server"} asks for your input`;
  }

  userLine(ctx) {
    const { server, tool } = this.render(ctx);
    return `The MCP server ${server || "?"} needs this for its tool ${tool || "?"}. Answer, decline (an explicit no) or cancel.`;
  }

  drawKey(ctx, state) {
    return [...super.drawKey(ctx, state), this.mode, [...this.opened], [...this.skipped]];
  }

  formOf(key, req) {
    if (!this.forms.has(key)) this.forms.set(key, new ElicitationForm(`mcp-${this.id}-${this.forms.size}`, req.schema));
    return this.forms.get(key);
  }

  draw(ctx, state) {
    if (state === "answered") return this.answeredCard(ctx);
    if (state !== "pending") return super.draw(ctx, state);
    const requests = this.requests(ctx);
    const onlyLinks = requests.length > 0 && requests.every(([, req]) => req.mode === "url");
    const several = requests.length > 1;
    const sections = requests.map(([key, req], i) => this.section(key, req, i, several));
    // A form, so that Enter in a field does what the primary button does.
    const primary = onlyLinks ? () => this.finish() : this.mode === "review" ? () => this.send() : () => this.review();
    return [
      this.head(ctx, "Needs your answer"),
      this.description(ctx),
      h(
        "form",
        { class: "mcp-form", novalidate: true, "aria-label": this.title(ctx), onsubmit: (event) => { event.preventDefault(); if (!this.busy) primary(); } },  // prettier-ignore
        ...sections,
        h(
          "div",
          { class: "widget-actions" },
          onlyLinks ? this.linkButton(requests) : this.formButton(),
          h("button", { type: "button", class: "button", "data-action": "decline", disabled: this.busy, onclick: () => this.decline() }, several ? "Decline all" : "Decline"),
          h("button", { type: "button", class: "button", "data-action": "cancel", disabled: this.busy, onclick: () => this.cancel() }, "Cancel"),
          this.deadline(ctx),
        ),
      ),
      ...this.messages(),
    ];
  }

  /** The answer sent: each request's part of it, in words (values as the review showed
   *  them), rather than the JSON. */
  answeredCard(ctx) {
    const output = ctx.outcome && ctx.outcome.output;
    const responses = isObject(output) && isObject(output.responses) ? output.responses : null;
    if (!responses) return super.draw(ctx, "answered");
    const said = { decline: "Declined.", cancel: "Cancelled." };
    const parts = this.requests(ctx).map(([key, req]) => {
      const response = isObject(responses[key]) ? responses[key] : {};
      const message = typeof req.message === "string" && req.message ? req.message : key;
      let body;
      if (response.action !== "accept") body = h("p", { class: "widget-desc", text: said[response.action] || "No answer." });
      else if (req.mode === "url") body = h("p", { class: "widget-desc", text: "Finished on the page." });
      else body = this.formOf(key, req).review(isObject(response.content) ? response.content : {});
      return h("section", { class: "mcp-request", "data-request": key }, h("p", { class: "mcp-message", text: message }), body);
    });
    return [
      this.head(ctx, "Answered"),
      h("p", { class: "widget-result widget-result-ok", text: this.answeredHere() ? "Answer sent ✓" : "Answered ✓" }),
      ...parts,
      ...this.messages(),
    ];
  }

  section(key, req, index, several) {
    const headingId = `mcp-${this.id}-h${index}`;
    const message = typeof req.message === "string" && req.message ? req.message : key;
    const skipped = several ? this.skipped.get(key) : undefined;
    const toggle = !several
      ? null
      : skipped
        ? h("div", { class: "mcp-skip" }, h("button", { type: "button", class: "button button-small", "data-action": "answer-one", disabled: this.busy, onclick: () => this.skip(key, null) }, "Answer it after all"))  // prettier-ignore
        : h(
            "div",
            { class: "mcp-skip" },
            h("button", { type: "button", class: "button button-small", "data-action": "decline-one", disabled: this.busy, onclick: () => this.skip(key, "decline") }, "Decline this one"),  // prettier-ignore
            h("button", { type: "button", class: "button button-small", "data-action": "cancel-one", disabled: this.busy, onclick: () => this.skip(key, "cancel") }, "Cancel this one"),  // prettier-ignore
          );
    if (skipped) {
      const said = skipped === "decline" ? "You decline this request: the server is told no." : "You leave this request unanswered: the server is told it was cancelled.";
      return h(
        "section",
        { class: "mcp-request mcp-declined", "data-request": key, "data-skipped": skipped, "aria-labelledby": headingId },
        h("p", { class: "mcp-message", id: headingId, text: message }),
        h("p", { class: "widget-desc", text: said }),
        this.mode === "edit" ? toggle : null,
      );
    }
    if (req.mode === "url") {
      const url = webUrl(req.url);
      const host = typeof req.host === "string" ? req.host : url ? url.hostname : "";
      return h(
        "section",
        { class: "mcp-request", "data-request": key, "aria-labelledby": headingId },
        h("p", { class: "mcp-message", id: headingId, text: message }),
        h("p", { class: "widget-desc" }, "This opens a page on ", h("strong", { "data-testid": "mcp-host", text: host }), ". Come back here when you have finished there."),
        url
          ? h("button", { type: "button", class: "button", "data-action": "open", disabled: this.busy, onclick: () => this.open(key, url) }, `Open ${host}`)
          : h("p", { class: "widget-error", text: "The server sent a link this page will not open." }),
        this.mode === "edit" ? toggle : null,
      );
    }
    const form = this.formOf(key, req);
    const body =
      this.mode === "review"
        ? [h("p", { class: "tool-label", text: "Your answer" }), form.review(this.content[key] || {})]
        : [...form.elements(), toggle];
    return h("fieldset", { class: "mcp-request", "data-request": key }, h("legend", { class: "mcp-message", text: message }), body);
  }

  /** Answer one request of several with `action` ("decline" or "cancel") alone, or
   *  (null) answer it after all; focus stays on the request's buttons. */
  skip(key, action) {
    if (action) this.skipped.set(key, action);
    else this.skipped.delete(key);
    this.update();
    const next = this.root.querySelector(`[data-request="${CSS.escape(key)}"] .mcp-skip button`);
    if (next) next.focus();
  }

  formButton() {
    if (this.mode === "review") {
      return [
        h("button", { type: "submit", class: "button button-primary", "data-action": "submit", disabled: this.busy }, "Send"),
        h("button", { type: "button", class: "button", "data-action": "edit", disabled: this.busy, onclick: () => this.edit() }, "Edit"),
      ];
    }
    return h("button", { type: "submit", class: "button button-primary", "data-action": "review", disabled: this.busy }, "Review answer");
  }

  linkButton(requests) {
    const ready = requests.every(([key]) => this.opened.has(key) || this.skipped.has(key));
    return h("button", { type: "submit", class: "button button-primary", "data-action": "finished", disabled: this.busy || !ready, title: ready ? null : "Open the page first" }, "I finished");
  }

  open(key, url) {
    window.open(url.href, "_blank", "popup,noopener,noreferrer");
    this.opened.add(key);
    this.update();
  }

  /** Check every form; with no mistakes, show the answer for review. */
  review() {
    const ctx = this.ctx();
    const content = {};
    let first = null;
    let bad = 0;
    for (const [key, req] of this.requests(ctx)) {
      if (req.mode === "url" || this.skipped.has(key)) continue;
      const checked = this.formOf(key, req).check();
      content[key] = checked.content;
      bad += checked.invalid.length;
      if (!first && checked.invalid.length) first = checked.invalid[0];
    }
    if (first) {
      this.error = bad === 1 ? "One answer needs fixing: see the marked field." : `${bad} answers need fixing: see the marked fields.`;
      this.update();
      first.focus();
      return;
    }
    this.error = "";
    this.content = content;
    this.mode = "review";
    this.update();
    const send = this.root.querySelector('[data-action="submit"]');
    if (send) send.focus();
  }

  edit() {
    this.mode = "edit";
    this.update();
    const field = this.root.querySelector("input, select");
    if (field) field.focus();
  }

  send() {
    const responses = {};
    for (const [key, req] of this.requests(this.ctx())) {
      if (this.skipped.has(key)) responses[key] = { action: this.skipped.get(key) };
      else responses[key] = req.mode === "url" ? { action: "accept" } : { action: "accept", content: this.content[key] || {} };
    }
    this.error = "";
    this.answer({ state: "output-available", output: { responses } }, { intent: "output" });
  }

  finish() {
    if (this.busy) return;
    const responses = {};
    for (const [key] of this.requests(this.ctx())) responses[key] = { action: this.skipped.get(key) || "accept" };
    this.error = "";
    this.answer({ state: "output-available", output: { responses } }, { intent: "output" });
  }

  async cancel() {
    const callView = await this.settle({ outcome: "cancelled" });
    if (!callView) return;
    this.answer({ state: "output-available", output: { status: "cancelled" } }, { intent: "cancelled", settled: true, view: callView });
  }
}
