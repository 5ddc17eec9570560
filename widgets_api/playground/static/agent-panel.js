// Parkway playground: the agent panel.
//
// It shows the agent's head revision (GET /api/agent), keeps the user's working copy of
// the template in a JSON editor, and commits that copy (POST /api/agent/commit) on top of
// the version it read, so a change made elsewhere meanwhile is refused, never merged.
//
// The "Playground build kit" toggle (remembered for this tab only in sessionStorage;
// until it is touched, as the server says: on for the built-in demo, off for the user's
// own agent, so that its turns offer the model what the deployed agent has and no more)
// lays the server's agent-template overlay over a throwaway copy of the working template
// for each new turn; while it is on for the user's own agent, the panel says how many
// tools the model sees that the agent does not have. A commit always sends the user's own template,
// never the overlay: the kit must never ship with the published agent. Where the kit
// replaces a value the user set, an override hint says so beside the editor.
//
// Below it, the Code section (code-panel.js): the sandbox's status and the agent's
// function library.

import { isObject, kitGroups, kitSentence, kitToolCount, revisionItems, runsCode, short } from "./agent-panel-lists.js";
import { CodePanel } from "./code-panel.js";
import { canonical, errorMessage, h, pretty } from "./playground-base.js";

const KIT_STORAGE_KEY = "parkway.playground.buildKit";

/** The tab's choice: true (on), false (off) or null (never made: the server's default). */
function readKit() {
  try {
    const stored = window.sessionStorage.getItem(KIT_STORAGE_KEY);
    return stored === null ? null : stored !== "off";
  } catch {
    return null; // storage disabled: the default
  }
}

function writeKit(on) {
  try {
    window.sessionStorage.setItem(KIT_STORAGE_KEY, on ? "on" : "off");
  } catch {
    // storage disabled: the toggle lasts until the page reloads
  }
}

function copy(value) {
  return JSON.parse(JSON.stringify(value));
}

/** The value at `path` inside `value`, or undefined. */
function valueAt(value, path) {
  let current = value;
  for (const key of path) {
    if (!isObject(current) || !Object.hasOwn(current, key)) return undefined;
    current = current[key];
  }
  return current;
}

/** The agent panel in `root`; `api` is the API client (playground-base.js). */
export class AgentPanel {
  constructor(api, root) {
    this.api = api;
    this.root = root;
    this.els = {};
    this.head = null; // the GET /api/agent body
    this.overlay = null; // additional_context.playground_build_kit.agent_template_overlay
    this.working = null; // the editor's template, parsed; null while it is not a JSON object
    this.problem = ""; // why the editor's text is not a usable template
    this.kitChoice = readKit(); // the tab's own choice, or null
    this.kitOn = false; // known once the agent is read: the choice, else the server's default
    this.kitDefault = false;
    this.loadError = "";
    this.newer = null; // a version committed elsewhere while this tab had uncommitted edits
    this.message = null; // {tone, text, reload} after a commit attempt
    this.committing = false;
    this.seq = 0;
    this.ready = Promise.resolve();
    this.code = new CodePanel(api);
  }

  /** Build the panel and read the agent. */
  start() {
    const root = this.root;
    const e = this.els;
    const reload = () => this.reload();
    e.meta = h("span", { class: "agent-meta", "data-testid": "agent-meta" });
    e.loadError = h("p", { class: "panel-error", role: "alert", "data-testid": "agent-load-error", hidden: true });
    e.noticeText = h("span");
    e.notice = h(
      "div",
      { class: "panel-notice", role: "status", "data-testid": "agent-notice", hidden: true },
      e.noticeText,
      h("button", { type: "button", class: "button button-small", "data-action": "reload-agent", onclick: reload }, "Reload"),
    );
    e.kit = h("input", { type: "checkbox", id: "kit-toggle", "data-testid": "kit-toggle", onchange: () => this.setKit(e.kit.checked) });
    e.kitNote = h("p", { class: "panel-note", "data-testid": "kit-note" });
    e.kitWarning = h("p", { class: "kit-warning", role: "status", "data-testid": "kit-warning", hidden: true });
    e.kitList = h("div", { class: "kit-list" });
    e.drawer = h("details", { class: "kit-drawer", "data-testid": "kit-drawer" }, h("summary", {}, "What the kit adds"), e.kitList);
    e.editor = h("textarea", { id: "template-editor", class: "template-editor", "data-testid": "template-editor", spellcheck: "false", rows: 14, oninput: () => this.edit() });
    e.edited = h("span", { class: "edited-badge", "data-testid": "template-edited", hidden: true }, "uncommitted edits");
    e.discard = h("button", { type: "button", class: "button button-quiet button-small", "data-action": "discard", hidden: true, onclick: () => this.discard() }, "Discard");
    e.problem = h("p", { class: "panel-error", role: "alert", "data-testid": "template-error", hidden: true });
    e.hints = h("ul", { class: "override-hints", "aria-label": "Build kit overrides" });
    e.summary = h("input", { type: "text", id: "commit-summary", class: "commit-summary-input", "data-testid": "commit-summary", maxlength: "500", placeholder: "What changed, in one line" });
    e.commit = h("button", { type: "button", class: "button button-primary", "data-action": "commit", onclick: () => this.commit() }, "Commit");
    e.messageText = h("span");
    e.messageReload = h("button", { type: "button", class: "button button-small", "data-action": "reload-agent", onclick: reload }, "Reload");
    e.message = h("div", { class: "commit-message", role: "status", "data-testid": "commit-message", hidden: true }, e.messageText);
    e.revisions = h("ol", { class: "revisions", "data-testid": "revisions" });
    e.body = h(
      "div",
      { class: "panel-body", hidden: true },
      h(
        "section",
        { class: "kit", "aria-label": "Playground build kit" },
        h("label", { class: "kit-toggle", for: "kit-toggle" }, e.kit, h("span", { text: "Playground build kit" })),
        e.kitWarning,
        e.kitNote,
        e.drawer,
      ),
      h(
        "div",
        { class: "template-field" },
        h("div", { class: "field-head" }, h("label", { for: "template-editor", text: "Working template (JSON)" }), e.edited, e.discard),
        e.hints,
        e.editor,
        e.problem,
      ),
      h("div", { class: "commit-row" }, h("label", { class: "visually-hidden", for: "commit-summary", text: "Commit summary" }), e.summary, e.commit),
      e.message,
      h("h3", { class: "panel-subtitle", text: "Revisions" }),
      e.revisions,
    );
    root.replaceChildren(h("div", { class: "panel-head" }, h("h2", { class: "panel-title", text: "Agent" }), e.meta), e.loadError, e.notice, e.body, this.code.root);
    this.ready = this.load();
    this.code.start();
  }

  /** A save_function call settled: list the library again. */
  libraryChanged() {
    this.code.refresh();
  }

  // -- reading the agent ---------------------------------------------------------------

  /** GET /api/agent and show it (the editor starts over from the committed template).
   *  Only the latest of overlapping loads is shown. */
  async load() {
    const seq = ++this.seq;
    let result;
    try {
      result = await this.api.json("api/agent");
    } catch (error) {
      result = { ok: false, status: 0, data: null, error };
    }
    if (seq !== this.seq) return;
    if (!result.ok) {
      if (result.status === 404) this.loadError = "This server keeps no agent revisions.";
      else if (result.status === 0) this.loadError = `Could not reach the server: ${result.error.message}`;
      else this.loadError = errorMessage(result.data, result.status);
      this.render();
      return;
    }
    const data = result.data;
    if (!isObject(data) || !isObject(data.template) || !Number.isInteger(data.version)) {
      this.loadError = "The server sent an agent this page cannot read.";
      this.render();
      return;
    }
    const kit = isObject(data.additional_context) ? data.additional_context.playground_build_kit : null;
    this.head = data;
    this.overlay = isObject(kit) && isObject(kit.agent_template_overlay) ? kit.agent_template_overlay : null;
    this.kitDefault = isObject(kit) && kit.on_by_default === true;
    this.kitOn = this.kitChoice === null ? this.kitDefault : this.kitChoice;
    this.loadError = "";
    this.newer = null;
    this.els.editor.value = pretty(data.template);
    this.working = copy(data.template);
    this.problem = "";
    this.root.dataset.version = String(data.version);
    this.renderKit();
    this.renderRevisions();
    this.render();
  }

  async reload() {
    this.message = null;
    await this.load();
  }

  /** A `data-committed-revision` part: someone (the agent's commit_config, usually)
   *  committed a revision. Refresh, unless that would throw away the user's edits. */
  committed(data) {
    const version = data && Number.isInteger(data.version) ? data.version : null;
    if (version === null) return;
    if (this.head && version <= this.head.version) return; // already shown (or a replay)
    if (this.head && this.edited()) {
      this.newer = version;
      this.render();
      return;
    }
    this.load();
  }

  // -- the working template ------------------------------------------------------------

  edit() {
    try {
      const parsed = JSON.parse(this.els.editor.value);
      if (!isObject(parsed)) throw new Error("the template must be a JSON object");
      canonical(parsed); // throws for what the server refuses too (1e400, a lone surrogate)
      this.working = parsed;
      this.problem = "";
    } catch (error) {
      this.working = null;
      this.problem = `Not a valid template: ${error.message}`;
    }
    this.message = null;
    this.render();
  }

  discard() {
    if (!this.head) return;
    this.els.editor.value = pretty(this.head.template);
    this.working = copy(this.head.template);
    this.problem = "";
    this.message = null;
    if (this.newer !== null) {
      this.load();
      return;
    }
    this.render();
  }

  edited() {
    if (!this.head) return false;
    return this.working === null || canonical(this.working) !== canonical(this.head.template);
  }

  /** The sandbox permissions the build kit lays over new turns while it is on, or null. */
  kitPermissions() {
    if (!this.kitOn || !this.overlay || !this.head || this.head.editable === false) return null;
    const sandbox = this.overlay.sandbox;
    return isObject(sandbox) && isObject(sandbox.permissions) ? sandbox.permissions : null;
  }

  setKit(on) {
    this.kitOn = on;
    this.kitChoice = on;
    writeKit(on);
    this.render();
  }

  /** The build kit laid over the working template: {template, overrides}. Throws a
   *  TypeError naming the problem when the template cannot take it. */
  merged() {
    return globalThis.ParkwayOverlay.mergeOverlay(this.working, this.overlay);
  }

  /** What a new turn's POST /api/chat carries: {template} to send as `agentTemplate`,
   *  {} to send none (the server runs the committed head), or {error} to not send. */
  async forTurn() {
    await this.ready;
    // A server with agent editing off runs only its agent: it refuses any template sent
    // with a turn, the build kit's included.
    if (!this.head || this.head.editable === false) return {};
    if (this.working === null) {
      return { error: `The working template is not valid (${this.problem.replace(/^Not a valid template: /, "")}): fix it or discard your edits before sending.` };
    }
    if (this.kitOn && this.overlay) {
      try {
        return { template: this.merged().template };
      } catch (error) {
        return { error: `The build kit cannot be applied to the working template: ${error.message}` };
      }
    }
    return this.edited() ? { template: copy(this.working) } : {};
  }

  hintText(override) {
    const where = override.path.join(".");
    if (override.identity) return `Build kit overrides ${where} entry ${override.identity} (yours differs) while it is on`;
    return `Build kit overrides ${where} (yours: ${short(valueAt(this.working, override.path))}) while it is on`;
  }

  // -- committing ----------------------------------------------------------------------

  async commit() {
    if (this.committing || !this.head) return;
    if (this.working === null) {
      this.message = { tone: "bad", text: this.problem };
      this.render();
      return;
    }
    this.committing = true;
    this.message = null;
    this.render();
    // The user's own template: never the build kit.
    const body = { template: this.working, expectedVersion: this.head.version, summary: this.els.summary.value.trim() };
    let result;
    try {
      result = await this.api.json("api/agent/commit", { method: "POST", body });
    } catch (error) {
      result = { ok: false, status: 0, data: null, error };
    }
    this.committing = false;
    if (result.status === 201) {
      this.els.summary.value = "";
      await this.load();
      this.message = { tone: "ok", text: `Committed version ${result.data.version}.` };
    } else if (result.status === 409) {
      this.message = { tone: "bad", text: "The agent changed elsewhere; reload", reload: true };
    } else if (result.status === 0) {
      this.message = { tone: "bad", text: `Could not reach the server: ${result.error.message}` };
    } else {
      this.message = { tone: "bad", text: errorMessage(result.data, result.status) };
    }
    this.render();
  }

  // -- drawing -------------------------------------------------------------------------

  render() {
    const e = this.els;
    e.loadError.hidden = !this.loadError;
    e.loadError.textContent = this.loadError;
    const head = this.head;
    e.body.hidden = !head;
    if (!head) return;
    e.meta.textContent = `${head.agentId} · v${head.version}`;
    e.notice.hidden = this.newer === null;
    e.noticeText.textContent = this.newer === null ? "" : `A new revision ${this.newer} was committed; reload to see it.`;
    const editable = head.editable !== false;
    this.root.dataset.editable = String(editable);
    e.kit.checked = editable && this.kitOn;
    e.kit.disabled = !editable || !this.overlay;
    e.kit.title = editable ? "" : "Agent editing is off on this server: turns run its agent as it is";
    this.root.dataset.kit = editable && this.kitOn ? "on" : "off";
    // Loud while on for the user's own agent: its turns are not what it will do deployed.
    const extra = editable && this.kitOn && !this.kitDefault ? kitToolCount(this.overlay, this.working || head.template) : 0;
    e.kitWarning.hidden = !extra;
    e.kitWarning.textContent = extra
      ? `On: the model sees ${extra} tool${extra === 1 ? "" : "s"} your agent does not have when deployed. Turn the kit off to try the agent as it ships.`
      : "";
    const edited = this.edited();
    this.root.dataset.edited = String(edited);
    e.edited.hidden = !edited;
    e.discard.hidden = !edited;

    let problem = this.problem;
    let overrides = [];
    if (!problem && editable && this.kitOn && this.overlay) {
      try {
        overrides = this.merged().overrides;
      } catch (error) {
        problem = `The build kit cannot be applied to this template: ${error.message}`;
      }
    }
    e.problem.hidden = !problem;
    e.problem.textContent = problem;
    // Whether code can run matters only to an agent that runs code: its own template's
    // execute_code, or the build kit's while the kit is on.
    const own = runsCode(this.working === null ? head.template : this.working);
    const fromKit = !own && editable && this.kitOn && runsCode(this.overlay);
    this.code.relevant(own || fromKit, fromKit);
    e.editor.setAttribute("aria-invalid", String(Boolean(this.problem)));
    e.hints.replaceChildren(
      ...overrides.map((override) =>
        h("li", { class: "override-hint", "data-testid": "override-hint", "data-path": override.path.join("."), text: this.hintText(override) }),
      ),
    );
    // Only the agent's editors commit (GET /api/agent says mayCommit); anyone else's
    // edits run as a working copy in their own chats.
    const mayCommit = editable && head.mayCommit !== false;
    this.root.dataset.mayCommit = String(mayCommit);
    e.commit.disabled = !mayCommit || this.committing || !edited || this.working === null;
    e.commit.title = !editable
      ? "Agent editing is off on this server"
      : !mayCommit
      ? "Only the agent's editors can commit; your edits run in your own chats"
      : edited
        ? ""
        : "Edit the template to commit a new revision";

    const message = this.message;
    e.message.hidden = !message;
    e.message.dataset.tone = message ? message.tone : "";
    e.messageText.textContent = message ? message.text : "";
    e.message.replaceChildren(e.messageText, ...(message && message.reload ? [e.messageReload] : []));
  }

  renderKit() {
    this.els.kitNote.textContent = kitSentence(this.overlay);
    this.els.kitList.replaceChildren(...kitGroups(this.overlay));
  }

  renderRevisions() {
    this.els.revisions.replaceChildren(...revisionItems(this.head.revisions));
  }
}

