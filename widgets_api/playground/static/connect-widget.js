// Parkway playground: the connect widget (descriptor kind `connect`). It draws the
// card, offers existing connections, and answers the call; its ConnectFlow
// (connect-flow.js) runs the sign-in popup. What the card says about the call comes
// from the call's stored outcome, which is what the agent was told: a later Retry that
// connects is shown beside it, never instead of it.
//
// An ES module imported by widgets.js; no build step.

import { ConnectFlow } from "./connect-flow.js";
import { errorMessage, h, sameOrigin } from "./playground-base.js";
import { isResolved } from "./ui-stream.js";
import { Widget } from "./widget.js";

function connected(outcome) {
  return outcome.outcome === "output" && outcome.output && outcome.output.connected === true;
}

/** What the agent was told about a call that did not connect, in its own words. */
export function toldAgent(outcome) {
  const output = outcome.outcome === "output" && outcome.output && typeof outcome.output === "object" ? outcome.output : null;
  const reason = output ? output.reason : outcome.outcome;
  return `not connected (${typeof reason === "string" && reason ? reason : "no reason given"})`;
}

export class ConnectWidget extends Widget {
  constructor(id, chat) {
    super(id, "connect", chat);
    this.flow = new ConnectFlow(this);
    this.resumeChecked = false;
    this.existing = null; // the caller's active connections to this provider, once read
    this.fetchingExisting = false;
    this.root.dataset.hints = "0";
  }

  provider(ctx) {
    return ctx.desc.provider || (ctx.input && ctx.input.provider) || "";
  }

  providerName(ctx) {
    if (typeof ctx.desc.providerName === "string" && ctx.desc.providerName) return ctx.desc.providerName;
    const provider = this.provider(ctx) || "the account";
    return provider.charAt(0).toUpperCase() + provider.slice(1);
  }

  title(ctx) {
    return `Connect ${this.providerName(ctx)}`;
  }

  userLine(ctx) {
    // an MCP server that needs OAuth: the card names the server and its host (the
    // descriptor's mcpServer), the one the token will be sent to
    const mcp = ctx.desc.mcpServer;
    if (mcp && typeof mcp.server === "string") {
      const host = typeof mcp.host === "string" && mcp.host ? ` (${mcp.host})` : "";
      return `The MCP server ${mcp.server}${host} asks you to sign in with your ${this.providerName(ctx)} account.`;
    }
    const reason = ctx.input && typeof ctx.input.reason === "string" ? ctx.input.reason : null;
    return reason || `The agent wants to use your ${this.providerName(ctx)} account.`;
  }

  connectionsUrl(ctx) {
    const given = sameOrigin(ctx.desc.connectionsUrl);
    if (given) return given;
    const provider = this.provider(ctx);
    return provider ? `api/connections?provider=${encodeURIComponent(provider)}` : null;
  }

  /** The caller's connections to this provider (GET connectionsUrl), or null. */
  async listConnections(ctx) {
    const url = this.connectionsUrl(ctx);
    if (!url) return null;
    const result = await this.chat.api.json(url);
    if (!result.ok || !result.data || !Array.isArray(result.data.connections)) return null;
    const provider = this.provider(ctx);
    return result.data.connections.filter((c) => c && typeof c === "object" && typeof c.id === "string" && (!provider || c.provider === provider));
  }

  /** Read once, for a pending call: the active connections the user may answer with. */
  fetchExisting(ctx) {
    if (this.existing !== null || this.fetchingExisting || ctx.desc.configured === false || !ctx.desc.useUrl) return;
    this.fetchingExisting = true;
    this.listConnections(ctx)
      .then((list) => {
        this.existing = (list || []).filter((c) => c.status === "active");
      })
      .catch(() => {
        this.existing = [];
      })
      .finally(() => {
        this.fetchingExisting = false;
        this.update();
      });
  }

  /** The descriptor's start link, which carries a one-time start token: the server
   *  starts a sign-in only from a page that was shown the widget. */
  startUrl(ctx) {
    return sameOrigin(ctx.desc.startUrl);
  }

  /** A start link starts one sign-in: read the call's view again, whose descriptor
   *  carries a fresh token, so that the next Connect or Retry has one. */
  async refreshStart() {
    const url = this.ctx().statusUrl;
    if (!url) return;
    try {
      const result = await this.chat.api.json(url);
      if (result.ok && result.data && result.data.toolCallId === this.id && result.data.widget) this.chat.calls.set(this.id, result.data);
    } catch {
      // the next open reads the view again
    }
  }

  state(ctx) {
    const outcome = ctx.outcome;
    const phase = this.flow.phase;
    if (outcome) {
      if (connected(outcome)) return "connected";
      if (outcome.outcome === "cancelled" && outcome.reason === "superseded_by_user_message") return "ended";
      if (phase === "reconnected") return "reconnected";
      if (phase === "retrying") return "retrying";
      return outcome.outcome === "declined" ? "declined" : "failed";
    }
    if (ctx.answer) return this.localState(ctx);
    return phase === "connecting" ? "connecting" : "pending";
  }

  chip(ctx, state) {
    if (["failed", "reconnected", "retrying"].includes(state)) return ["not connected", "bad"];
    if (state === "declined") return ["not connected", "neutral"];
    return super.chip(ctx, state);
  }

  drawKey(ctx, state) {
    const f = this.flow;
    const existing = (this.existing || []).map((c) => [c.id, c.account]);
    return [...super.drawKey(ctx), f.phase, f.blocked, f.closedHint, f.resumed, f.account, f.connectedName, f.retryNote, existing, state];
  }

  pollsItself() {
    return this.flow.phase === "connecting";
  }

  button(action, label, onclick, cls = "button") {
    return h("button", { type: "button", class: cls, "data-action": action, disabled: this.busy, onclick }, label);
  }

  draw(ctx, state) {
    const name = this.providerName(ctx);
    const blocked = this.flow.blocked;
    const blockedLink = blocked
      ? h(
          "p",
          { class: "widget-hint" },
          "Your browser blocked the pop-up. ",
          h("a", { href: blocked, target: "_blank", "data-action": "open-tab", onclick: () => this.flow.openedInTab() }, "Continue in a new tab"),
        )
      : null;
    switch (state) {
      case "connected": {
        const output = ctx.outcome.output || {};
        const account = typeof output.account === "string" ? output.account : null;
        return [
          this.head(ctx, "Connected"),
          h("p", { class: "widget-result widget-result-ok", text: `${name} connected ✓` }),
          account ? h("p", { class: "widget-desc", "data-testid": "connect-account", text: `Account: ${account}` }) : null,
          ...this.messages(),
        ];
      }
      case "ended":
        return this.endedCard(ctx, state);
      case "declined":
      case "failed":
      case "retrying":
      case "reconnected":
        return [...this.notConnected(ctx, state, name), blockedLink, ...this.messages()];
      case "connecting":
        return [
          this.head(ctx, "Connecting"),
          h("p", { class: "widget-result", role: "status", text: `Connecting ${name}…` }),
          h("p", { class: "widget-desc", "data-testid": "connect-popup-hint", text: "Complete the sign-in in the pop-up window." }),
          this.flow.resumed
            ? h("p", { class: "widget-hint", "data-testid": "connect-resumed", text: "The page was reloaded while you were signing in. If the pop-up is gone, open the sign-in again." })
            : null,
          this.flow.closedHint ? h("p", { class: "widget-hint", "data-testid": "popup-closed-hint", text: "Did you close the window? If you did, cancel and try again." }) : null,
          h(
            "div",
            { class: "widget-actions" },
            this.flow.resumed ? this.button("reopen", "Open the sign-in again", () => this.connect()) : null,
            this.button("cancel", "Cancel", () => this.cancel()),
          ),
          ...this.messages(),
        ];
      case "submitting":
      case "queued":
        return [this.head(ctx, "Connect"), this.queuedCard(ctx, state), ...this.messages()];
      default:
        return [...this.pendingCard(ctx, name), blockedLink, ...this.messages()];
    }
  }

  /** The call ended without a connection: what happened, what the agent was told, and
   *  Retry (or, after a retry that connected, that the agent does not know yet). */
  notConnected(ctx, state, name) {
    const outcome = ctx.outcome || {};
    // The callback records a provider's refusal as an output {connected: false, reason}.
    const output = outcome.outcome === "output" && outcome.output && typeof outcome.output === "object" ? outcome.output : null;
    const reasonOf = output && typeof output.reason === "string" ? output.reason : outcome.outcome;
    const why = {
      declined: "You chose not to connect for now.",
      cancelled: "The connection was cancelled.",
      timeout: "The connection request timed out.",
      denied: `Access was not allowed at ${name}.`,
      error: (output && typeof output.message === "string" && output.message) || outcome.message || "The connection failed.",
    }[reasonOf] || "";
    const f = this.flow;
    let after;
    if (state === "reconnected") {
      const who = f.account ? ` (${f.account})` : "";
      after = [
        h("p", { class: "widget-result widget-result-ok", "data-testid": "connect-reconnected", text: `${f.connectedName || name} connected ✓${who} after this request ended.` }),
        h("p", { class: "widget-desc", text: "The agent does not know: ask it to continue." }),
      ];
    } else if (state === "retrying") {
      after = [
        h("p", { class: "widget-result", role: "status", text: `Connecting ${name} again…` }),
        h("div", { class: "widget-actions" }, this.button("cancel", "Cancel", () => this.cancel())),
      ];
    } else {
      after = [
        f.retryNote ? h("p", { class: "widget-hint", text: f.retryNote }) : null,
        h("div", { class: "widget-actions" }, this.button("retry", "Retry", () => this.retry())),
      ];
    }
    return [
      this.head(ctx, "Not connected"),
      state === "declined"
        ? h("p", { class: "widget-result widget-result-neutral", text: `${name} not connected` })
        : h("p", { class: "widget-result widget-result-bad", text: "Connection not completed" }),
      why ? h("p", { class: "widget-desc", text: why }) : null,
      h("p", { class: "widget-desc", "data-testid": "connect-told", text: `The agent was told: ${toldAgent(outcome)}.` }),
      ...after,
    ];
  }

  pendingCard(ctx, name) {
    this.fetchExisting(ctx);
    const scopes = Array.isArray(ctx.desc.scopes) ? ctx.desc.scopes.filter((s) => typeof s === "string") : [];
    const existing = this.existing || [];
    return [
      this.head(ctx, "Connect an account"),
      this.description(ctx),
      scopes.length
        ? h("p", { class: "widget-desc", "data-testid": "connect-scopes", "data-scopes": scopes.join(" ") }, `Access requested: ${scopes.join(", ")}`)
        : null,
      ctx.desc.configured === false
        ? h("p", { class: "widget-hint", text: `This server has no ${name} sign-in configured; the connection will not complete.` })
        : null,
      h(
        "div",
        { class: "widget-actions" },
        this.button("connect", `Connect ${name}`, () => this.connect(), "button button-primary"),
        this.button("decline", "Not now", () => this.notNow()),
        this.deadline(ctx),
      ),
      existing.length
        ? h(
            "div",
            { class: "widget-existing", "data-testid": "connect-existing" },
            h("p", { class: "widget-desc", text: "Or answer with a connection you already have:" }),
            h(
              "div",
              { class: "widget-actions" },
              existing.map((c) =>
                h("button", { type: "button", class: "button button-option", "data-action": "use", "data-connection": c.id, disabled: this.busy, onclick: () => this.use(c) }, `Use ${c.account}`),
              ),
            ),
          )
        : null,
    ];
  }

  /** Answer the call with an existing connection: the server settles it (useUrl), and
   *  the chat continues with the outcome it recorded. */
  async use(connection) {
    const ctx = this.ctx();
    const url = sameOrigin(ctx.desc.useUrl);
    if (!url || !this.chat.id) return;
    this.acted = true;
    this.busy = true;
    this.error = "";
    this.update();
    let result = null;
    try {
      result = await this.chat.api.json(url, { method: "POST", body: { chatId: this.chat.id, toolCallId: this.id, connectionId: connection.id } });
    } catch (error) {
      this.error = `Could not reach the server: ${error.message}`;
    }
    this.busy = false;
    if (result && result.ok && result.data && result.data.outcome) {
      this.finish({ ...(ctx.view || {}), toolCallId: this.id, status: "settled", outcome: result.data.outcome });
      return;
    }
    const winner = result && result.data && result.data.error ? result.data.error.outcome : null;
    if (result && result.status === 409 && winner) {
      this.chat.winner(this.id, winner);
      return;
    }
    if (result) this.error = errorMessage(result.data, result.status);
    this.update();
  }

  // The popup must open synchronously inside the click handler, or it is blocked.
  connect() {
    const url = this.startUrl(this.ctx());
    this.error = "";
    if (!url) {
      this.error = "This request has no sign-in address.";
      this.update();
      return;
    }
    this.acted = true;
    this.flow.resumed = false;
    this.flow.open(url, "connecting");
  }

  retry() {
    const ctx = this.ctx();
    const base = this.startUrl(ctx);
    if (!base) return;
    this.error = "";
    this.flow.retry(`${base}${base.includes("?") ? "&" : "?"}retry=1`, ctx);
  }

  /** The call is settled (by the OAuth callback, this tab, another tab or a timeout):
   *  show it and continue the chat with the result the server recorded. */
  finish(callView) {
    this.flow.end();
    this.root.removeAttribute("data-popup");
    this.chat.calls.set(this.id, callView);
    const part = this.chat.findToolPart(this.id);
    if (part && !isResolved(part) && callView.outcome) {
      const outcome = callView.outcome;
      let output;
      if (outcome.outcome === "output") output = outcome.output;
      else {
        output = { connected: false, reason: outcome.outcome };
        if (outcome.outcome === "error" && outcome.message) output.message = outcome.message;
      }
      this.chat.answer(this.id, { state: "output-available", output }, { settled: true, view: callView });
    } else {
      this.chat.redraw();
    }
  }

  async notNow() {
    const callView = await this.settle({ outcome: "declined" });
    if (callView) this.finish(callView);
  }

  async cancel() {
    if (this.flow.phase === "retrying") {
      this.flow.end();
      this.flow.closePopup();
      this.update();
      return;
    }
    const callView = await this.settle({ outcome: "cancelled" });
    if (callView) {
      this.flow.closePopup();
      this.finish(callView);
    }
  }

  update() {
    const ctx = this.ctx();
    if (!this.resumeChecked) {
      this.resumeChecked = true;
      this.flow.resume(ctx);
    }
    super.update();
    // Another tab, the callback or the sweeper settled the call while this one waited.
    if (ctx.outcome && this.flow.phase === "connecting") this.finish(ctx.view || { toolCallId: this.id, status: "settled", outcome: ctx.outcome });
  }

  dispose() {
    this.flow.stop();
  }
}
