// Parkway playground: Code Mode in the agent panel. Whether this server can run code
// (GET /api/sandbox: "Code: bwrap", "Code: UNCONFINED", "Code: unavailable — why")
// and the agent's function library (GET /api/agent/library): each function's signature,
// version and description, with every version's code one click away
// (GET /api/agent/library/{name}). The list is read again when a save_function call
// settles (AgentPanel.libraryChanged). Everything from the server goes in as text.
//
// An ES module imported by agent-panel.js; no build step.

import { h } from "./playground-base.js";

function libraryPath(name) {
  return `api/agent/library/${encodeURIComponent(name)}`;
}

function when(ms) {
  // The page's time format ("4:17 PM"), with the date: versions span days.
  return Number.isFinite(ms) && ms > 0 ? new Date(ms).toLocaleString([], { dateStyle: "medium", timeStyle: "short" }) : "";
}

/** The sandbox's status as [text, state, title]. */
export function sandboxStatus(sandbox) {
  if (!sandbox || typeof sandbox !== "object") return ["Code: off (this server runs no code)", "off", ""];
  if (sandbox.available !== true) {
    return [`Code: unavailable — ${sandbox.reason || "no reason given"}`, "unavailable", ""];
  }
  const isolation = sandbox.isolation && typeof sandbox.isolation === "object" ? sandbox.isolation : {};
  const layers = Array.isArray(isolation.layers) ? isolation.layers.join(", ") : "";
  if (sandbox.confined === false) {
    return ["Code: UNCONFINED (programs run without isolation)", "unconfined", layers];
  }
  return [`Code: ${sandbox.provider || isolation.provider || "sandbox"}`, "confined", layers];
}

/** The panel's Code section; `api` is the API client (playground-base.js). Its `root`
 *  goes into the agent panel. */
export class CodePanel {
  constructor(api) {
    this.api = api;
    this.seq = 0;
    this.items = new Map(); // "name@version" -> its list item (an open one stays open)
    this.status = h("p", { class: "sandbox-status", "data-testid": "sandbox-status", "data-state": "checking", role: "status", text: "Code: checking…" });
    this.note = h("p", { class: "panel-note", "data-testid": "library-note", text: "Loading the library…" });
    this.list = h("ol", { class: "library", "data-testid": "library" });
    this.root = h(
      "section",
      { class: "code-panel", "data-testid": "code-panel", "aria-label": "Code" },
      h("h3", { class: "panel-subtitle", text: "Code" }),
      this.status,
      (this.why = h("p", { class: "panel-note", "data-testid": "sandbox-note", hidden: true })),
      h("h3", { class: "panel-subtitle", text: "Function library" }),
      this.note,
      this.list,
    );
  }

  /** Show the sandbox's status only to an agent that runs code (`runs`); `fromKit`: its
   *  execute_code comes from the build kit. */
  relevant(runs, fromKit) {
    this.status.hidden = !runs;
    this.why.hidden = runs && !fromKit;
    this.why.textContent = !runs
      ? "This agent runs no code: its template has no execute_code tool."
      : "The build kit adds execute_code: your template has none.";
  }

  start() {
    this.checkSandbox();
    this.refresh();
  }

  async checkSandbox() {
    let result;
    try {
      result = await this.api.json("api/sandbox");
    } catch (error) {
      result = { ok: false, data: null, status: 0 };
    }
    const sandbox = result.ok && result.data && typeof result.data === "object" ? result.data : undefined;
    const [text, state, title] = sandbox === undefined ? ["Code: status unknown (the server did not answer)", "unknown", ""] : sandboxStatus(sandbox);
    this.status.textContent = text;
    this.status.dataset.state = state;
    this.status.title = title;
  }

  /** Read the library again; only the latest of overlapping reads is shown. */
  async refresh() {
    const seq = ++this.seq;
    let result;
    try {
      result = await this.api.json("api/agent/library");
    } catch (error) {
      result = { ok: false, status: 0, data: null, error };
    }
    if (seq !== this.seq) return;
    const functions = result.ok && result.data && Array.isArray(result.data.functions) ? result.data.functions : null;
    if (!functions) {
      this.note.textContent = result.status === 404 ? "This server keeps no function library." : "The library could not be read.";
      this.note.hidden = false;
      this.list.replaceChildren();
      return;
    }
    this.note.hidden = functions.length > 0;
    this.note.textContent = "No saved functions yet. The agent saves one with save_function (you approve each save).";
    this.list.replaceChildren(...functions.map((fn) => this.item(fn)));
    this.root.dataset.functions = String(functions.length);
  }

  item(fn) {
    const name = String(fn.name);
    const key = `${name}@${fn.version}`;
    const known = this.items.get(key);
    if (known) return known;
    const versions = h("div", { class: "library-versions" });
    const details = h("details", { class: "library-code" }, h("summary", { "data-action": "show-versions" }, "Code and versions"), versions);
    details.addEventListener("toggle", () => {
      if (details.open && !versions.childElementCount) this.loadVersions(name, versions);
    });
    const item = h(
      "li",
      { class: "library-fn", "data-testid": "library-function", "data-name": name, "data-version": String(fn.version) },
      h("div", { class: "library-fn-head" }, h("code", { class: "library-signature", text: String(fn.signature || name) }), h("span", { class: "library-version", text: `v${fn.version}` })),
      fn.description ? h("p", { class: "library-description", text: String(fn.description) }) : null,
      details,
    );
    this.items.set(key, item);
    return item;
  }

  /** Every version of `name`, newest first, each with its code. */
  async loadVersions(name, box) {
    box.replaceChildren(h("p", { class: "panel-note", text: "Loading…" }));
    let result;
    try {
      result = await this.api.json(libraryPath(name));
    } catch (error) {
      result = { ok: false, data: null, status: 0 };
    }
    const versions = result.ok && result.data && Array.isArray(result.data.versions) ? result.data.versions : null;
    if (!versions) {
      box.replaceChildren(h("p", { class: "panel-error", text: "The versions could not be read." }));
      return;
    }
    box.replaceChildren(
      ...[...versions].reverse().map((version) =>
        h(
          "div",
          { class: "library-version-item", "data-version": String(version.version) },
          h("div", { class: "library-version-meta", text: [`v${version.version}`, version.by ? `by ${version.by}` : "", when(version.at)].filter(Boolean).join(" · ") }),
          version.description ? h("p", { class: "library-description", text: String(version.description) }) : null,
          h("pre", { class: "library-source", "data-field": "code", text: String(version.code) }),
        ),
      ),
    );
  }
}
