// Parkway playground: the helpers every part of the page shares (DOM builder, ids,
// canonical JSON, same-origin URLs) and the API client (Api: the cookie session made
// before the first request, or the host application's token, as the server's way of
// knowing its users has it; JSON errors; "not signed in" said once). An ES module
// imported by the page's other modules; it holds no state of its own (playground.js
// makes the one Api and passes it on). No build step.

/** The API's origin. The page is served by the API, so it is the page's own origin. */
export const API_ORIGIN = window.location.origin;

/** The app's root URL: `/`, or the prefix a host application mounts Parkway at (`/pw/`).
 *  This module is served at `{root}static/playground-base.js`, so the root is known from
 *  its own URL, whatever the page's address (`/pw` or `/pw/?chat=...`). */
export const APP_ROOT = new URL("../", import.meta.url);

/** A path of the app (`api/chat`, relative to the app's root; an absolute path such as
 *  a widget descriptor's URL stays as it is) as a same-origin path. */
export function appUrl(path) {
  const url = new URL(path, APP_ROOT);
  return url.pathname + url.search;
}

export function newId(prefix) {
  const bytes = new Uint8Array(10);
  crypto.getRandomValues(bytes);
  return `${prefix}_${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

export function pretty(value) {
  return value === undefined ? "" : JSON.stringify(value, null, 2);
}

/** RFC 8785 canonical JSON, as the server computes it (canonical.js): equal values give
 *  equal strings, 1.0 and 1 alike; throws a TypeError for a value with no such form. */
export { canonicalJson as canonical } from "./canonical.js";

/** h("div", {class: "x", "data-action": "go", onclick: fn}, child, "text", ...) */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** A same-origin URL from a descriptor, or null: the page never follows a descriptor
 *  to another origin. */
export function sameOrigin(url) {
  if (typeof url !== "string" || !url) return null;
  try {
    const parsed = new URL(url, API_ORIGIN);
    return parsed.origin === API_ORIGIN ? parsed.pathname + parsed.search : null;
  } catch {
    return null;
  }
}

export function errorMessage(body, status) {
  const error = body && typeof body === "object" ? body.error : null;
  if (error && typeof error.message === "string") return error.message;
  return `The request failed (HTTP ${status}).`;
}

/** How the server knows its users, as it told the page (its `parkway-auth` meta tag):
 *  "session" (anonymous sessions: the page asks for one), "jwt" (a signed-in user's token,
 *  which a host application hands an embedded page), "header" (an authenticating proxy)
 *  or "host" (the host application's own sign-in). */
export function authMode(doc = document) {
  const meta = doc.querySelector('meta[name="parkway-auth"]');
  const mode = meta ? meta.getAttribute("content") : "";
  return ["jwt", "header", "host"].includes(mode) ? mode : "session";
}

/** What to tell a user the server does not know, for each way it knows its users. */
function signedOutText(mode, hostToken) {
  const hook = 'answer its "parkway:token-request" message with {type: "parkway:token", token: "<JWT>"} (docs/embedding.md, "The token hook")';
  if (mode === "jwt" && hostToken) {
    return `You are not signed in: the application this page is embedded in sent it no token the server accepts. It must ${hook}.`;
  }
  if (mode === "jwt") {
    return `You are not signed in. This server knows its users by the token their sign-in gives them (auth=jwt), and this page has none it accepts. Open the playground from your application, which hands it the token: in a cookie that jwt_cookie names, when Parkway is mounted on your site; or, from a page whose origin is in allowed_origins that frames or opens this one, it must ${hook}.`;
  }
  if (mode === "header") {
    return "You are not signed in. This server knows its users by what its authenticating proxy tells it (auth=header): open the playground through that proxy, not at this address.";
  }
  return "You are not signed in. This server knows its users by the application it is part of: sign in there, then reload this page.";
}

/** The API client. With anonymous sessions (`auth` "session") `start()` makes sure of a
 *  session before the page's first request (POST /api/sessions keeps the principal of a
 *  valid cookie, and makes one otherwise), so a first visit does not begin with a 401 in
 *  the console; a request that still meets a 401 (the session expired meanwhile) makes a
 *  new session and is retried once.
 *
 *  With a host token (`hostToken`, host-token.js: a page embedded by a host application
 *  that signs its users in) the page asks the host for the user's token instead, sends it
 *  as `Authorization: Bearer` with every request, and on a 401 asks the host for a fresh
 *  one and retries once.
 *
 *  Any other way (`auth` "jwt", "header", "host") the server issues no sessions, so none
 *  is asked for: a 401 that no fresh host token answers means the user is not signed in,
 *  which `onSignedOut(text)` is told once, with what to do. */
export class Api {
  constructor(hostToken = null, auth = "session") {
    this.hostToken = hostToken;
    this.auth = auth;
    this.sessionPromise = null;
    this.ready = Promise.resolve();
    this.onSignedOut = null; // (text) => void, set by the page
    this.signedOut = false;
  }

  /** True when requests carry the host's token (no cookie): a popup, which cannot carry
   *  it, needs a ticket (connect-flow.js). */
  get bearer() {
    return Boolean(this.hostToken && this.hostToken.token);
  }

  /** Begin the session bootstrap (or wait for the host's first token); every request
   *  waits for it. A server that issues no sessions gets none asked of it: the requests
   *  go out as they are (with the host's token, if one came). */
  start() {
    const first = this.hostToken ? this.hostToken.start() : Promise.resolve(null);
    const sessions = this.auth === "session";
    this.ready = first
      .then((token) => (token || !sessions ? undefined : this.ensureSession()))
      .catch(() => undefined);
    return this.ready;
  }

  /** POST /api/sessions once, however many requests found themselves without one. */
  ensureSession() {
    if (!this.sessionPromise) {
      this.sessionPromise = fetch(appUrl("api/sessions"), { method: "POST", credentials: "same-origin" })
        .then((response) => {
          if (!response.ok) throw new Error(`could not start a session (HTTP ${response.status})`);
        })
        .finally(() => {
          this.sessionPromise = null;
        });
    }
    return this.sessionPromise;
  }

  /** fetch, after the session bootstrap, with a new session (or a fresh host token) and
   *  one retry on 401. `path` is a path of the app (see appUrl). */
  async fetch(path, { method = "GET", body, signal } = {}) {
    await this.ready;
    const url = appUrl(path);
    const init = { method, credentials: "same-origin", cache: "no-store", headers: {}, signal };
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const host = this.hostToken;
    const send = () => {
      const token = host ? host.token : null;
      if (token) init.headers.authorization = `Bearer ${token}`;
      return fetch(url, init).then((response) => ({ response, token }));
    };
    let { response, token } = await send();
    if (response.status === 401 && (host || this.auth === "session")) {
      if (!host) await this.ensureSession();
      // a token that came meanwhile is tried at once; else the host is asked for one
      else if (host.token === token) await host.ask("unauthorized");
      ({ response } = await send());
    }
    if (response.status === 401 && this.auth !== "session") this.notSignedIn();
    return response;
  }

  /** Say once that the server does not know this user, and what to do about it. */
  notSignedIn() {
    if (this.signedOut) return;
    this.signedOut = true;
    document.documentElement.dataset.signedOut = "true";
    if (this.onSignedOut) this.onSignedOut(signedOutText(this.auth, this.hostToken));
  }

  /** fetch and read a JSON answer: {ok, status, data}. */
  async json(url, options) {
    const response = await this.fetch(url, options);
    const data = await response.json().catch(() => null);
    return { ok: response.ok, status: response.status, data };
  }
}
