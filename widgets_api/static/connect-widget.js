// Parkway playground: the request_connection widget. It opens the OAuth popup, waits
// for the server to settle the call (polling it; the popup's postMessage is only a
// hint), offers existing connections, and confirms a Retry on an ended call against
// the server's connection list.
//
// An ES module imported by widgets.js; no build step.

import { page } from "/static/page-context.js";
import { API_ORIGIN, api, errorMessage, h, sameOrigin } from "/static/playground-base.js";
import { isResolved } from "/static/ui-stream.js";
import { Widget } from "/static/widget.js";

const CONNECT_POLL_MS = 1000;
const POPUP_CLOSED_GRACE_MS = 3000;

/** request_connection: an OAuth popup the server completes. The server is the source
 *  of truth (DESIGN §6): the popup's postMessage is only a hint to look now, the widget
 *  polls the call's status while connecting, and a popup that reads `closed` (which a
 *  provider's Cross-Origin-Opener-Policy also causes) is never taken as a cancel. */
export class ConnectWidget extends Widget {
  constructor(id) {
    super(id, "connect");
    this.phase = "idle"; // idle | connecting | retrying | reconnected
    this.popup = null;
    this.blocked = null; // the URL to offer as a link when the popup was blocked
    this.closedAt = null;
    this.closedHint = false;
    this.timer = null;
    this.checking = false;
    this.hints = 0;
    this.account = null;
    this.connectedName = null; // the provider's name from the confirming connection
    this.retryNote = "";
    this.retryPressedAt = null;
    this.retryBaseline = null; // a promise of the connection list read when Retry was pressed
    this.hinted = false; // a verified "connected" message arrived during this retry
    this.confirming = false;
    this.existing = null; // the caller's active connections to this provider, once read
    this.fetchingExisting = false;
    this.onMessage = (event) => this.message(event);
    this.root.dataset.hints = "0";
  }

  providerName(ctx) {
    if (typeof ctx.desc.providerName === "string" && ctx.desc.providerName) return ctx.desc.providerName;
    const provider = ctx.desc.provider || (ctx.input && ctx.input.provider) || "the account";
    return provider.charAt(0).toUpperCase() + provider.slice(1);
  }

  title(ctx) {
    return `Connect ${this.providerName(ctx)}`;
  }

  connectionsUrl(ctx) {
    const given = sameOrigin(ctx.desc.connectionsUrl);
    if (given) return given;
    const provider = ctx.desc.provider || (ctx.input && ctx.input.provider);
    return provider ? `/api/connections?provider=${encodeURIComponent(provider)}` : null;
  }

  /** The caller's connections to this provider (GET connectionsUrl), or null. */
  async listConnections(ctx) {
    const url = this.connectionsUrl(ctx);
    if (!url) return null;
    const result = await api.json(url);
    if (!result.ok || !result.data || !Array.isArray(result.data.connections)) return null;
    const provider = ctx.desc.provider || (ctx.input && ctx.input.provider);
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
      const result = await api.json(url);
      if (result.ok && result.data && result.data.toolCallId === this.id && result.data.widget) page.chat.calls.set(this.id, result.data);
    } catch {
      // the next open reads the view again
    }
  }

  state(ctx) {
    const outcome = ctx.outcome;
    if (this.phase === "reconnected") return "reconnected";
    if (outcome) {
      if (outcome.outcome === "output" && outcome.output && outcome.output.connected === true) return "connected";
      if (outcome.outcome === "cancelled" && outcome.reason === "superseded_by_user_message") return "ended";
      if (this.phase === "retrying") return "retrying";
      return outcome.outcome === "declined" ? "declined" : "failed";
    }
    if (ctx.answer) return this.localState(ctx);
    return this.phase === "connecting" ? "connecting" : "pending";
  }

  drawKey(ctx, state) {
    const existing = (this.existing || []).map((c) => [c.id, c.account]);
    return [...super.drawKey(ctx), this.phase, this.blocked, this.closedHint, this.account, this.connectedName, this.retryNote, existing, state];
  }

  pollsItself() {
    return this.phase === "connecting";
  }

  draw(ctx, state) {
    const name = this.providerName(ctx);
    const scopes = Array.isArray(ctx.desc.scopes) && ctx.desc.scopes.length ? ctx.desc.scopes : null;
    const reason = ctx.input && typeof ctx.input.reason === "string" ? ctx.input.reason : null;
    const button = (action, label, onclick, cls = "button") =>
      h("button", { type: "button", class: cls, "data-action": action, disabled: this.busy, onclick }, label);
    const blockedLink = this.blocked
      ? h(
          "p",
          { class: "widget-hint" },
          "Your browser blocked the pop-up. ",
          h("a", { href: this.blocked, target: "_blank", "data-action": "open-tab", onclick: () => this.openedInTab() }, "Continue in a new tab"),
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
      case "reconnected": {
        const who = this.account ? ` (${this.account})` : "";
        return [
          this.head(ctx, "Connected"),
          h("p", { class: "widget-result widget-result-ok", "data-testid": "connect-reconnected", text: `${this.connectedName || name} connected ✓${who} — ask the agent to continue` }),
          h("p", { class: "widget-desc", text: "This request had already ended, so the chat does not continue by itself." }),
          ...this.messages(),
        ];
      }
      case "ended":
        return this.endedCard(ctx, state);
      case "declined":
      case "failed": {
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
        return [
          this.head(ctx, "Not connected"),
          state === "declined"
            ? h("p", { class: "widget-result widget-result-neutral", text: `${name} not connected` })
            : h("p", { class: "widget-result widget-result-bad", text: "Connection not completed" }),
          why ? h("p", { class: "widget-desc", text: why }) : null,
          this.retryNote ? h("p", { class: "widget-hint", text: this.retryNote }) : null,
          h("div", { class: "widget-actions" }, button("retry", `Retry`, () => this.retry())),
          blockedLink,
          ...this.messages(),
        ];
      }
      case "retrying":
      case "connecting":
        return [
          this.head(ctx, "Connecting"),
          h("p", { class: "widget-result", role: "status", text: `Connecting ${name}…` }),
          h("p", { class: "widget-desc", text: "Finish signing in in the pop-up window." }),
          this.closedHint ? h("p", { class: "widget-hint", "data-testid": "popup-closed-hint", text: "Did you close the window? If you did, cancel and try again." }) : null,
          h("div", { class: "widget-actions" }, button("cancel", "Cancel", () => this.cancel())),
          ...this.messages(),
        ];
      case "submitting":
      case "queued":
        return [this.head(ctx, "Connect"), this.queuedCard(ctx, state), ...this.messages()];
      default: {
        this.fetchExisting(ctx);
        const existing = this.existing || [];
        return [
          this.head(ctx, "Connect an account"),
          reason ? h("p", { class: "widget-desc", text: reason }) : this.description(ctx),
          scopes ? h("p", { class: "widget-desc", text: `Access requested: ${scopes.join(", ")}` }) : null,
          ctx.desc.configured === false
            ? h("p", { class: "widget-hint", text: `This server has no ${name} sign-in configured; the connection will not complete.` })
            : null,
          h(
            "div",
            { class: "widget-actions" },
            button("connect", `Connect ${name}`, () => this.connect(), "button button-primary"),
            button("decline", "Not now", () => this.notNow()),
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
          blockedLink,
          ...this.messages(),
        ];
      }
    }
  }

  /** Answer the call with an existing connection: the server settles it (useUrl), and
   *  the chat continues with the outcome it recorded. */
  async use(connection) {
    const ctx = this.ctx();
    const url = sameOrigin(ctx.desc.useUrl);
    if (!url || !page.chat.id) return;
    this.busy = true;
    this.error = "";
    this.update();
    let result = null;
    try {
      result = await api.json(url, { method: "POST", body: { chatId: page.chat.id, toolCallId: this.id, connectionId: connection.id } });
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
      page.chat.winner(this.id, winner);
      return;
    }
    if (result) this.error = errorMessage(result.data, result.status);
    this.update();
  }

  // The popup must open synchronously inside the click handler, or it is blocked.
  connect() {
    const url = this.startUrl(this.ctx());
    if (!url) {
      this.error = "This request has no sign-in address.";
      this.update();
      return;
    }
    this.open(url, "connecting");
  }

  retry() {
    const ctx = this.ctx();
    const base = this.startUrl(ctx);
    if (!base) return;
    this.open(`${base}${base.includes("?") ? "&" : "?"}retry=1`, "retrying");
    // What the server had when Retry was pressed: the retry is confirmed only by a
    // connection stored or refreshed after this (see confirmRetry).
    this.retryPressedAt = Date.now();
    this.hinted = false;
    this.retryBaseline = this.listConnections(ctx)
      .then((list) => (list ? new Map(list.map((c) => [c.id, c.updatedAt])) : null))
      .catch(() => null);
  }

  open(url, phase) {
    this.error = "";
    this.retryNote = "";
    const popup = window.open(url, `parkway-connect-${this.id}`, "popup=yes,width=520,height=720");
    if (!popup) {
      this.blocked = url;
      this.blockedPhase = phase;
      this.update();
      return;
    }
    this.begin(popup, phase);
  }

  openedInTab() {
    // A new tab has no opener link: only the server's status tells when it is done.
    this.begin(null, this.blockedPhase || "connecting");
  }

  begin(popup, phase) {
    this.stopFlow();
    this.popup = popup;
    this.phase = phase;
    this.blocked = null;
    this.closedAt = null;
    this.closedHint = false;
    this.refreshStart();
    window.addEventListener("message", this.onMessage);
    if (phase === "connecting") this.timer = window.setInterval(() => this.tick(), CONNECT_POLL_MS);
    else this.timer = window.setInterval(() => this.watchRetry(), CONNECT_POLL_MS);
    this.update();
  }

  stopFlow() {
    window.removeEventListener("message", this.onMessage);
    if (this.timer) window.clearInterval(this.timer);
    this.timer = null;
  }

  /** Accept only the callback page in this widget's own popup, on the API's origin,
   *  naming this chat and call; even then it only means "ask the server now". */
  message(event) {
    if (event.origin !== API_ORIGIN) return;
    if (!this.popup || event.source !== this.popup) return;
    const data = event.data;
    if (!data || typeof data !== "object" || data.type !== "parkway:connect") return;
    if (data.chatId !== page.chat.id || data.toolCallId !== this.id || typeof data.outcome !== "string") return;
    this.hints += 1;
    this.root.dataset.hints = String(this.hints);
    if (this.phase === "retrying") {
      // A retry is a new flow for an already settled call: there is no call status to
      // confirm it with, so a "connected" hint is confirmed with the connection list.
      if (data.outcome === "connected") {
        this.hinted = true;
        this.confirmRetry();
        return;
      }
      this.stopFlow();
      this.phase = "idle";
      this.retryNote = "The retry did not complete.";
      this.update();
      return;
    }
    this.check();
  }

  async tick() {
    if (this.popup && this.popup.closed && this.closedAt === null) this.closedAt = Date.now();
    await this.check();
    if (this.phase !== "connecting") return;
    if (this.closedAt !== null && !this.closedHint && Date.now() - this.closedAt >= POPUP_CLOSED_GRACE_MS) {
      this.closedHint = true;
      this.root.dataset.popup = "closed";
      this.update();
    }
  }

  async watchRetry() {
    if (await this.confirmRetry()) return;
    if (this.phase !== "retrying") return;
    if (this.popup && this.popup.closed) {
      if (this.closedAt === null) this.closedAt = Date.now();
      else if (Date.now() - this.closedAt >= POPUP_CLOSED_GRACE_MS) {
        this.stopFlow();
        this.phase = "idle";
        this.retryNote = this.hinted
          ? "The sign-in said it connected, but the server has no new connection. Try again."
          : "The retry window was closed before it finished.";
        this.update();
      }
    }
  }

  /** Confirm a retry with the server: a connection of this provider stored or refreshed
   *  after Retry was pressed, i.e. new or newer than in the list read at that moment
   *  (the server's own clock on both sides); by the page's clock only when that read
   *  failed. Neither the popup's message nor its closing is taken as proof. */
  async confirmRetry() {
    if (this.confirming || this.phase !== "retrying") return false;
    this.confirming = true;
    try {
      const baseline = await this.retryBaseline;
      const list = await this.listConnections(this.ctx());
      if (!list || this.phase !== "retrying") return false;
      const fresh = list.filter((c) => {
        if (c.status !== "active" || typeof c.updatedAt !== "number") return false;
        if (baseline) return !baseline.has(c.id) || c.updatedAt > baseline.get(c.id);
        return c.updatedAt > this.retryPressedAt;
      });
      if (!fresh.length) return false;
      const latest = fresh.reduce((a, b) => (b.updatedAt > a.updatedAt ? b : a));
      this.stopFlow();
      this.phase = "reconnected";
      this.account = typeof latest.account === "string" ? latest.account : null;
      this.connectedName = typeof latest.providerName === "string" && latest.providerName ? latest.providerName : null;
      this.update();
      return true;
    } catch {
      return false; // the next tick asks again
    } finally {
      this.confirming = false;
    }
  }

  /** Ask the server; settle the widget if the call is settled. */
  async check() {
    const url = this.ctx().statusUrl;
    if (!url || this.checking) return;
    this.checking = true;
    try {
      const result = await api.json(url);
      if (result.ok && result.data && result.data.status === "settled") this.finish(result.data);
    } catch {
      // the next tick asks again
    } finally {
      this.checking = false;
    }
  }

  /** The call is settled (by the OAuth callback, this tab, another tab or a timeout):
   *  show it and continue the chat with the result the server recorded. */
  finish(callView) {
    this.stopFlow();
    this.phase = "idle";
    this.root.removeAttribute("data-popup");
    page.chat.calls.set(this.id, callView);
    const part = page.chat.findToolPart(this.id);
    if (part && !isResolved(part) && callView.outcome) {
      const outcome = callView.outcome;
      let output;
      if (outcome.outcome === "output") output = outcome.output;
      else {
        output = { connected: false, reason: outcome.outcome };
        if (outcome.outcome === "error" && outcome.message) output.message = outcome.message;
      }
      page.chat.answer(this.id, { state: "output-available", output }, { settled: true, view: callView });
    } else {
      page.view.render();
    }
  }

  async notNow() {
    const callView = await this.settle({ outcome: "declined" });
    if (callView) this.finish(callView);
  }

  async cancel() {
    if (this.phase === "retrying") {
      this.stopFlow();
      this.phase = "idle";
      this.closePopup();
      this.update();
      return;
    }
    const callView = await this.settle({ outcome: "cancelled" });
    if (callView) {
      this.closePopup();
      this.finish(callView);
    }
  }

  closePopup() {
    try {
      if (this.popup && !this.popup.closed) this.popup.close();
    } catch {
      // a severed popup cannot be closed from here
    }
  }

  update() {
    super.update();
    // Another tab, the callback or the sweeper settled the call while this one waited.
    const ctx = this.ctx();
    if (ctx.outcome && this.phase === "connecting") this.finish(ctx.view || { toolCallId: this.id, status: "settled", outcome: ctx.outcome });
  }

  dispose() {
    this.stopFlow();
  }
}
