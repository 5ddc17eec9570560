// Parkway playground: the host application's token. A page framed by (or opened from) a
// page of another origin that signs its users in takes that user's JWT by postMessage
// and sends it as `Authorization: Bearer` (docs/embedding.md, "The token hook").
//
// Messages, both ways:
//   host -> page  {type: "parkway:token", token: "<JWT>"}    at any time; the newest wins
//   page -> host  {type: "parkway:token-request", reason}    reason "start" (the page
//                 needs its first token) or "unauthorized" (the API answered 401)
//
// A token is taken only from the host window (the parent of a framed page, else the
// opener), only when the message's origin is exactly one the server lists
// (`allowed_origins`, in the page's `parkway-embed-origins` meta tag), and only in the
// shape of a compact JWS. It is kept in this module's memory, never in storage, and sent
// only with the page's own same-origin API requests. Requests for a token go to those
// origins only, never `*`.
//
// An ES module imported by playground.js; no build step.

const JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
const MAX_TOKEN = 8192;
// How long the page waits for the host's answer to a token request.
const ANSWER_MS = 10000;

/** The origins that may hand the page a token, as the server lists them. */
export function embedOrigins(doc = document) {
  const meta = doc.querySelector('meta[name="parkway-embed-origins"]');
  return ((meta && meta.getAttribute("content")) || "").split(/\s+/).filter(Boolean);
}

/** The window that may hand the page a token: the parent of a framed page, else the
 *  window that opened it; null for a page on its own. */
function hostWindow() {
  if (window.parent !== window) return window.parent;
  return window.opener || null;
}

export class HostToken {
  /** A HostToken for this page, or null when nothing may hand it a token (no origin
   *  is listed, or the page is neither framed nor opened by another window). */
  static forPage() {
    const origins = embedOrigins();
    const host = hostWindow();
    return origins.length && host ? new HostToken(host, origins) : null;
  }

  constructor(host, origins) {
    this.host = host;
    this.origins = origins;
    this.token = null;
    this.hostOrigin = null; // the origin the first token came from: later requests go there only
    this.accepted = 0;
    this.asking = null; // the token request in flight, shared by every request that needs it
    this.waiters = [];
    this.onMessage = (event) => this.message(event);
  }

  /** Listen to the host and ask it for a first token; resolves with it, or null. */
  start() {
    window.addEventListener("message", this.onMessage);
    return this.ask("start");
  }

  message(event) {
    if (event.source !== this.host || !this.origins.includes(event.origin)) return;
    const data = event.data;
    if (!data || typeof data !== "object" || data.type !== "parkway:token") return;
    const token = data.token;
    if (typeof token !== "string" || token.length > MAX_TOKEN || !JWS.test(token)) return;
    this.token = token;
    this.hostOrigin = event.origin;
    this.accepted += 1;
    document.documentElement.dataset.hostTokens = String(this.accepted);
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve(token);
  }

  /** Ask the host for a token (once, however many requests need one meanwhile);
   *  resolves with the token that arrives, or null when none does in time. */
  ask(reason) {
    if (this.asking) return this.asking;
    this.asking = new Promise((resolve) => {
      const timer = window.setTimeout(() => finish(null), ANSWER_MS);
      const finish = (token) => {
        window.clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== finish);
        this.asking = null;
        resolve(token);
      };
      this.waiters.push(finish);
      const request = { type: "parkway:token-request", reason };
      for (const origin of this.targets()) this.host.postMessage(request, origin);
    });
    return this.asking;
  }

  /** Where a token request may go: the origin the last token came from; before that,
   *  the parent's origin when the browser names it (and it is listed), else each
   *  listed origin (the browser delivers to the one the host has). */
  targets() {
    if (this.hostOrigin) return [this.hostOrigin];
    const ancestors = window.location.ancestorOrigins;
    if (window.parent !== window && ancestors && ancestors.length) {
      return this.origins.includes(ancestors[0]) ? [ancestors[0]] : [];
    }
    return this.origins;
  }
}
