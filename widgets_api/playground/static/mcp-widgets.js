// Parkway playground: the widget of an MCP server's request for input (descriptor kinds
// "mcp-form" and "mcp-url", runner/mcp/input.py). Minimal for now: it shows each
// request (a form's message and JSON schema; a link's message and host, with a button
// that opens it in a popup) and answers with the generic JSON editor, prefilled with
// the answer's shape: {"responses": {<key>: {"action": "accept", "content"?: {...}}}}.
// Decline settles the call "declined" (every request is declined to the server).
//
// An ES module imported by widgets.js; no build step.

import { h, pretty } from "./playground-base.js";
import { ClientWidget } from "./client-widgets.js";

export class McpInputWidget extends ClientWidget {
  constructor(id, chat) {
    super(id, chat);
    this.prefilled = false;
  }

  requests(ctx) {
    const render = (ctx.desc && ctx.desc.render) || {};
    return render.requests && typeof render.requests === "object" ? render.requests : {};
  }

  title(ctx) {
    const render = (ctx.desc && ctx.desc.render) || {};
    return `${render.server || "MCP server"} asks for your input`;
  }

  draw(ctx, state) {
    const drawn = super.draw(ctx, state);
    if (state !== "pending") return drawn;
    const requests = this.requests(ctx);
    if (!this.prefilled) {
      const responses = {};
      for (const [key, req] of Object.entries(requests)) {
        responses[key] = req.mode === "url" ? { action: "accept" } : { action: "accept", content: {} };
      }
      this.editor.value = pretty({ responses });
      this.prefilled = true;
    }
    const shown = Object.entries(requests).map(([key, req]) =>
      req.mode === "url"
        ? h("div", { class: "widget-field", "data-request": key },
            h("p", { text: `${req.message || "Open this page"} (${req.host})` }),
            h("button", { type: "button", class: "button", "data-action": "open", onclick: () => window.open(req.url, "_blank", "popup,noopener") }, `Open ${req.host}`))  // prettier-ignore
        : h("div", { class: "widget-field", "data-request": key },
            h("p", { text: req.message || key }),
            h("pre", { class: "json", "aria-label": "Form schema", text: pretty(req.schema) })),  // prettier-ignore
    );
    // the requests take the place of the call's input (the tool's own arguments)
    return [drawn[0], drawn[1], ...shown, ...drawn.slice(4)];
  }
}
