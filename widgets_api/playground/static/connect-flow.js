// Parkway playground: one connect widget's sign-in flow. It opens the OAuth popup (or
// offers a tab link when the popup is blocked), waits for the server to settle the call
// (polling it; the popup's postMessage is only a hint), confirms a Retry on an ended
// call against the server's connection list, and remembers a flow in progress for this
// tab (sessionStorage), so a reload while the popup is open still shows "Connecting…".
// A page that authenticates with its host's token (no cookie) opens the popup at a start
// link with a ticket it asks for with that token.
//
// An ES module imported by connect-widget.js; no build step.

import { API_ORIGIN, errorMessage, sameOrigin } from "./playground-base.js";

const CONNECT_POLL_MS = 1000;
const POPUP_CLOSED_GRACE_MS = 3000;
// A flow remembered across a reload is trusted this long; the server's deadline for a
// connection request is ten minutes.
const REMEMBER_MS = 10 * 60 * 1000;

function storageKey(chatId, toolCallId) {
  return `parkway.connect:${chatId}:${toolCallId}`;
}

/** The sign-in flow of one ConnectWidget (connect-widget.js), which it tells when the
 *  call settles (`finish`), when a retry is confirmed or fails, and when to redraw. The
 *  server is the source of truth: a popup that reads `closed` (which a
 *  provider's Cross-Origin-Opener-Policy also causes) is never taken as a cancel. */
export class ConnectFlow {
  constructor(widget) {
    this.widget = widget;
    this.phase = "idle"; // idle | connecting | retrying | reconnected
    this.popup = null;
    this.blocked = null; // the URL to offer as a link when the popup was blocked
    this.blockedPhase = null;
    this.resumed = false; // picked up again after a reload: no popup handle
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
    this.onMessage = (event) => this.message(event);
  }

  get chat() {
    return this.widget.chat;
  }

  // -- starting ----------------------------------------------------------------------

  /** Open `url` in a popup (synchronously: the caller is a click handler, or the popup
   *  is blocked); on a block, offer it as a link. */
  open(url, phase) {
    this.retryNote = "";
    // A page holding its user's token in memory (host-token.js) has no cookie, and a
    // popup's navigation carries no Authorization header: the popup opens blank at once
    // (still inside the click), then goes to a start link whose ticket the page asks for
    // with its token.
    const ticketUrl = this.chat.api.bearer ? sameOrigin(this.widget.ctx().desc.ticketUrl) : null;
    const popup = window.open(ticketUrl ? "about:blank" : url, `parkway-connect-${this.widget.id}`, "popup=yes,width=520,height=720");
    if (!popup) {
      this.blockedPhase = phase;
      if (ticketUrl) {
        this.ticketed(ticketUrl, phase).then((ticketed) => {
          this.blocked = ticketed;
          this.widget.update();
        });
        return;
      }
      this.blocked = url;
      this.widget.update();
      return;
    }
    this.begin(popup, phase);
    if (ticketUrl) this.navigate(popup, ticketUrl, phase);
  }

  /** A start link with a fresh ticket (POST ticketUrl with the page's token), or null
   *  (the widget then says the sign-in could not start). */
  async ticketed(ticketUrl, phase) {
    const body = { chatId: this.chat.id, toolCallId: this.widget.id, retry: phase === "retrying" };
    let result = null;
    try {
      result = await this.chat.api.json(ticketUrl, { method: "POST", body });
    } catch {
      result = null;
    }
    const url = result && result.ok && result.data ? sameOrigin(result.data.startUrl) : null;
    if (!url) {
      this.widget.error = result ? `The sign-in could not start: ${errorMessage(result.data, result.status)}` : "Could not reach the server.";
    }
    return url;
  }

  async navigate(popup, ticketUrl, phase) {
    const url = await this.ticketed(ticketUrl, phase);
    if (!url) {
      this.closePopup();
      this.end();
      this.widget.update();
      return;
    }
    popup.location.replace(new URL(url, API_ORIGIN).href);
  }

  /** Retry on an ended call: a new sign-in, confirmed only by a connection the server
   *  stored or refreshed after this moment (see confirmRetry). */
  retry(url, ctx) {
    this.open(url, "retrying");
    this.retryPressedAt = Date.now();
    this.hinted = false;
    this.retryBaseline = this.widget
      .listConnections(ctx)
      .then((list) => (list ? new Map(list.map((c) => [c.id, c.updatedAt])) : null))
      .catch(() => null);
  }

  openedInTab() {
    // A new tab has no opener link: only the server's status tells when it is done.
    this.begin(null, this.blockedPhase || "connecting");
  }

  begin(popup, phase) {
    this.stop();
    this.popup = popup;
    this.phase = phase;
    this.blocked = null;
    this.closedAt = null;
    this.closedHint = false;
    this.widget.refreshStart();
    window.addEventListener("message", this.onMessage);
    if (phase === "connecting") {
      this.remember();
      this.timer = window.setInterval(() => this.tick(), CONNECT_POLL_MS);
    } else {
      this.timer = window.setInterval(() => this.watchRetry(), CONNECT_POLL_MS);
    }
    this.widget.update();
  }

  /** After a reload: a sign-in this tab started for a call still pending is picked up
   *  again (polling the server; the popup, if still open, finishes it). */
  resume(ctx) {
    const chatId = this.chat.id;
    if (!chatId || this.phase !== "idle") return;
    if (ctx.outcome) {
      this.forget();
      return;
    }
    if (ctx.answer) return;
    let record = null;
    try {
      record = JSON.parse(window.sessionStorage.getItem(storageKey(chatId, this.widget.id)) || "null");
    } catch {
      return; // storage disabled: nothing was remembered
    }
    if (!record || typeof record.at !== "number" || Date.now() - record.at > REMEMBER_MS) return;
    this.widget.acted = true; // this tab started the sign-in, before the reload
    this.resumed = true;
    this.begin(null, "connecting");
  }

  remember() {
    try {
      window.sessionStorage.setItem(storageKey(this.chat.id, this.widget.id), JSON.stringify({ at: Date.now() }));
    } catch {
      // storage disabled: a reload shows the Connect button again
    }
  }

  forget() {
    try {
      window.sessionStorage.removeItem(storageKey(this.chat.id, this.widget.id));
    } catch {
      // storage disabled: nothing to forget
    }
  }

  // -- ending ------------------------------------------------------------------------

  stop() {
    window.removeEventListener("message", this.onMessage);
    if (this.timer) window.clearInterval(this.timer);
    this.timer = null;
  }

  /** The flow is over: back to idle, the record gone. */
  end() {
    this.stop();
    this.forget();
    this.phase = "idle";
    this.resumed = false;
  }

  closePopup() {
    try {
      if (this.popup && !this.popup.closed) this.popup.close();
    } catch {
      // a severed popup cannot be closed from here
    }
  }

  // -- waiting -----------------------------------------------------------------------

  /** Accept only the callback page in this widget's own popup, on the API's origin,
   *  naming this chat and call; even then it only means "ask the server now". */
  message(event) {
    if (event.origin !== API_ORIGIN) return;
    if (!this.popup || event.source !== this.popup) return;
    const data = event.data;
    if (!data || typeof data !== "object" || data.type !== "parkway:connect") return;
    if (data.chatId !== this.chat.id || data.toolCallId !== this.widget.id || typeof data.outcome !== "string") return;
    this.hints += 1;
    this.widget.root.dataset.hints = String(this.hints);
    if (this.phase === "retrying") {
      // A retry is a new flow for an already settled call: there is no call status to
      // confirm it with, so a "connected" hint is confirmed with the connection list.
      if (data.outcome === "connected") {
        this.hinted = true;
        this.confirmRetry();
        return;
      }
      this.end();
      this.retryNote = "The retry did not complete.";
      this.widget.update();
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
      this.widget.root.dataset.popup = "closed";
      this.widget.update();
    }
  }

  async watchRetry() {
    if (await this.confirmRetry()) return;
    if (this.phase !== "retrying") return;
    if (this.popup && this.popup.closed) {
      if (this.closedAt === null) this.closedAt = Date.now();
      else if (Date.now() - this.closedAt >= POPUP_CLOSED_GRACE_MS) {
        this.end();
        this.retryNote = this.hinted
          ? "The sign-in said it connected, but the server has no new connection. Try again."
          : "The retry window was closed before it finished.";
        this.widget.update();
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
      const list = await this.widget.listConnections(this.widget.ctx());
      if (!list || this.phase !== "retrying") return false;
      const fresh = list.filter((c) => {
        if (c.status !== "active" || typeof c.updatedAt !== "number") return false;
        if (baseline) return !baseline.has(c.id) || c.updatedAt > baseline.get(c.id);
        return c.updatedAt > this.retryPressedAt;
      });
      if (!fresh.length) return false;
      const latest = fresh.reduce((a, b) => (b.updatedAt > a.updatedAt ? b : a));
      this.stop();
      this.phase = "reconnected";
      this.account = typeof latest.account === "string" ? latest.account : null;
      this.connectedName = typeof latest.providerName === "string" && latest.providerName ? latest.providerName : null;
      this.widget.update();
      return true;
    } catch {
      return false; // the next tick asks again
    } finally {
      this.confirming = false;
    }
  }

  /** Ask the server; settle the widget if the call is settled. */
  async check() {
    const url = this.widget.ctx().statusUrl;
    if (!url || this.checking) return;
    this.checking = true;
    try {
      const result = await this.chat.api.json(url);
      if (result.ok && result.data && result.data.status === "settled") this.widget.finish(result.data);
    } catch {
      // the next tick asks again
    } finally {
      this.checking = false;
    }
  }
}
