// Parkway playground: the Code Mode approval widgets.
//
//   - CodeReviewWidget (descriptor kind `code`, execute_code): the program with line
//     numbers and highlighting, its arguments, the mounted inputs with their sizes (from
//     the call's artifact list), the limits and the isolation, then Approve, Edit (the
//     edited program is what runs) and Deny; once approved, the run's result.
//   - LibraryChangeWidget (kind `library_change`, save_function): the function's name,
//     description and code, and a line diff against the version saved now.
//
// Both approve and deny exactly as ApprovalWidget does (an edit is settled through the
// call's statusUrl); only what they draw and how an edit is made differ.
// An ES module imported by widgets.js; no build step.

import { ApprovalWidget } from "./approval-widgets.js";
import { textDiffView } from "./commit-diff.js";
import { codeView, formatBytes, isCodeRun, outputView, sandboxView, textLines } from "./code-view.js";
import { canonical, errorMessage, h, pretty, sameOrigin } from "./playground-base.js";

function inputOf(ctx) {
  return ctx.input && typeof ctx.input === "object" && !Array.isArray(ctx.input) ? ctx.input : {};
}

function wasEdited(ctx) {
  return Boolean(ctx.outcome && ctx.outcome.input !== undefined);
}

/** The Edit part of a code card: a textarea with the raw code, shown in place of the
 *  highlighted lines while the person edits. Composed into both widgets. */
class CodeEditor {
  constructor(id) {
    this.editing = false;
    this.touched = false;
    this.textarea = h("textarea", { id: `code-${id}`, class: "code-editor", "data-field": "code", spellcheck: "false", rows: 12 });
    this.textarea.addEventListener("input", () => {
      this.touched = true;
    });
  }

  /** Start from the call's code, unless the person already typed. */
  fill(code) {
    if (!this.touched) this.textarea.value = typeof code === "string" ? code : "";
  }

  toggle() {
    this.editing = !this.editing;
    if (!this.editing) this.touched = false; // Cancel: back to the agent's code
  }

  /** The input to approve with the edited code, or undefined while not editing. */
  edited(input) {
    if (!this.editing) return undefined;
    const edited = { ...input, code: this.textarea.value };
    canonical(edited); // throws for what the server refuses too (a lone surrogate)
    return edited;
  }

  button(widget) {
    const label = this.editing ? "Cancel edit" : "Edit";
    const action = this.editing ? "cancel-edit" : "edit";
    return h("button", { type: "button", class: "button", "data-action": action, disabled: widget.busy, onclick: () => widget.toggleEdit() }, label);
  }

  /** The editor in place of the code, or the code. */
  view(lines, label) {
    if (!this.editing) return codeView(lines, { html: true, label });
    return h("label", { class: "widget-field", for: this.textarea.id }, "Edit the code (what you approve is what runs)", this.textarea);
  }
}

/** Shared by both widgets: edit in a textarea, approve the edited input. */
class CodeApprovalWidget extends ApprovalWidget {
  constructor(id, chat, kind) {
    super(id, chat, kind);
    this.code = new CodeEditor(id);
  }

  extraActions() {
    return [this.code.button(this)];
  }

  toggleEdit() {
    this.code.toggle();
    this.update();
  }

  editedInput(ctx) {
    return this.code.edited(inputOf(ctx));
  }

  drawKey(ctx, state) {
    return [...super.drawKey(ctx, state), this.code.editing];
  }

  chip(ctx, state) {
    if (state === "approved" && wasEdited(ctx) && !(ctx.part && ctx.part.state === "output-error")) return ["approved, edited", "ok"];
    return super.chip(ctx, state);
  }

  /** "Approved ✓" or "Approved with edits ✓", and the edited code as it ran. */
  approvedHead(ctx) {
    const edited = wasEdited(ctx);
    const items = [
      this.head(ctx, "Approved"),
      h("p", { class: "widget-result widget-result-ok", "data-testid": "code-approved", "data-edited": String(edited), text: `Approved${edited ? " with edits" : ""}${this.decidedBy(ctx)} ✓` }),
    ];
    if (edited) {
      items.push(
        h("div", { class: "tool-label", text: "The approved code (edited)" }),
        codeView(textLines(ctx.outcome.input && ctx.outcome.input.code), { label: "The approved code", testid: "code-edited" }),
      );
    }
    return items;
  }
}

export class CodeReviewWidget extends CodeApprovalWidget {
  constructor(id, chat) {
    super(id, chat, "code");
    this.artifacts = null; // artifact_id -> the record of an artifact the call mounts, once read
    this.artifactsError = "";
    this.fetching = false;
  }

  subject() {
    return "code run";
  }

  question() {
    return "Run this code?";
  }

  userLine() {
    return "The agent wants to run this Python program in the sandbox. Read it, then approve, edit or deny.";
  }

  chip(ctx, state) {
    const output = ctx.part && ctx.part.state === "output-available" ? ctx.part.output : null;
    if (state === "approved" && isCodeRun(output) && output.status !== "ok") return [output.status, "bad"];
    return super.chip(ctx, state);
  }

  drawKey(ctx, state) {
    return [...super.drawKey(ctx, state), this.artifacts ? this.artifacts.size : null, this.artifactsError];
  }

  draw(ctx, state) {
    if (state === "approved") return this.approvedCard(ctx);
    if (state !== "pending") return super.draw(ctx, state);
    const input = inputOf(ctx);
    if (!this.artifacts && !this.artifactsError && !this.fetching && this.namedInputs(input).length) this.fetchArtifacts(ctx);
    this.code.fill(input.code);
    return [
      this.head(ctx, "Code review"),
      this.description(ctx),
      sandboxView(ctx.desc.sandbox, input.limits, this.chat.panel.kitPermissions()),
      h("div", { class: "tool-label", text: "Program" }),
      this.code.view(ctx.desc.codeLines, "Program"),
      ...(input.args !== undefined ? this.labelled("Arguments", pretty(input.args)) : []),
      ...this.inputsView(input),
      ...this.decision(ctx),
    ];
  }

  /** [name, artifact id] of each input the program mounts. */
  namedInputs(input) {
    const inputs = input.inputs;
    if (Array.isArray(inputs)) return inputs.map((id) => [String(id), String(id)]);
    if (inputs && typeof inputs === "object") return Object.entries(inputs).map(([name, id]) => [name, String(id)]);
    return [];
  }

  inputsView(input) {
    const named = this.namedInputs(input);
    if (!named.length) return [];
    const items = named.map(([name, id]) => {
      const found = this.artifacts ? this.artifacts.get(id) : undefined;
      let size = "…";
      if (this.artifactsError) size = "size unknown";
      else if (this.artifacts) size = found ? `${formatBytes(found.bytes)} · ${found.media_type} · from ${found.source}` : "not found";
      return h(
        "li",
        { class: "code-input", "data-artifact-id": id, "data-found": String(Boolean(found)) },
        h("code", { text: name === id ? id : `${name} = ${id}` }),
        h("span", { class: found || !this.artifacts ? "code-input-size" : "code-input-size code-input-missing", "data-field": "input-size", text: size }),
      );
    });
    return [
      h("div", { class: "tool-label", text: "Inputs (read-only)" }),
      h("ul", { class: "code-inputs", "data-testid": "code-inputs" }, items),
      this.artifactsError ? h("p", { class: "widget-error", text: this.artifactsError }) : null,
    ];
  }

  /** The artifacts this call mounts (readable by its owner and by its approver), read
   *  once: each input's size. */
  async fetchArtifacts(ctx) {
    const missing = "The server did not say where this call's inputs are.";
    this.artifactsError = await readOnce(this, ctx.desc.artifactsUrl, missing, (result) => {
      const list = result.ok && result.data && Array.isArray(result.data.artifacts) ? result.data.artifacts : null;
      if (!list) return `The inputs could not be read: ${errorMessage(result.data, result.status)}`;
      this.artifacts = new Map(list.map((a) => [a.artifact_id, a]));
      return null;
    });
    this.update();
  }

  approvedCard(ctx) {
    const part = ctx.part;
    const items = this.approvedHead(ctx);
    if (part && part.state === "output-available") {
      items.push(h("div", { class: "tool-label", text: "The run" }), outputView(part.output, this.chat.id));
    } else if (part && part.state === "output-error") {
      items.push(h("p", { class: "widget-error", text: `The run failed: ${part.errorText}` }));
    } else if (this.chat.followsRuns !== false) {
      // (the approvals view does not follow the requester's run: it shows no result)
      items.push(h("p", { class: "widget-result widget-result-neutral", "data-testid": "code-running", text: "Running in the sandbox…" }));
    }
    items.push(...this.messages());
    return items;
  }
}

export class LibraryChangeWidget extends CodeApprovalWidget {
  constructor(id, chat) {
    super(id, chat, "library_change");
    this.current = undefined; // the saved head {version, code}; null: no such function yet
    this.currentError = "";
    this.fetching = false;
    this.unfinished = false; // this page saw the call before its output
  }

  name(ctx) {
    const name = inputOf(ctx).name;
    return typeof name === "string" && name ? name : "a function";
  }

  subject(ctx) {
    return `save ${this.name(ctx)}`;
  }

  question(ctx) {
    return `Save ${this.name(ctx)} to the agent's library?`;
  }

  userLine() {
    return "The agent wants to save a function to its library, where every later program of this agent can import it. Check the code, then approve, edit or deny.";
  }

  /** Once the save's output arrives here, the agent panel lists the new version. */
  update() {
    super.update();
    const part = this.ctx().part;
    if (!part || part.state !== "output-available") {
      this.unfinished = true;
    } else if (this.unfinished) {
      this.unfinished = false;
      this.chat.panel.libraryChanged();
    }
  }

  drawKey(ctx, state) {
    return [...super.drawKey(ctx, state), this.current === undefined ? "?" : this.current && this.current.version, this.currentError];
  }

  draw(ctx, state) {
    if (state === "approved") return this.approvedCard(ctx);
    if (state !== "pending") return super.draw(ctx, state);
    if (this.current === undefined && !this.currentError && !this.fetching) this.fetchCurrent(ctx);
    const input = inputOf(ctx);
    this.code.fill(input.code);
    const description = typeof input.description === "string" ? input.description : "";
    return [
      this.head(ctx, "Library change"),
      this.description(ctx),
      h("p", { class: "library-change-name", "data-testid": "library-function" }, h("code", { text: this.name(ctx) }), description ? h("span", { text: ` — ${description}` }) : null),
      ...this.diffPart(input),
      h("div", { class: "tool-label", text: "The code" }),
      this.code.view(ctx.desc.codeLines, "The function's code"),
      ...this.decision(ctx),
    ];
  }

  diffPart(input) {
    if (this.currentError) return [h("p", { class: "widget-error", text: this.currentError })];
    if (this.current === undefined) return [h("p", { class: "widget-result widget-result-neutral", text: "Loading the saved version…" })];
    if (this.current === null) {
      return [h("p", { class: "library-new", "data-testid": "library-new", text: "A new function: nothing is saved under this name yet." })];
    }
    const text = (code) => textLines(code).join("\n"); // no blank last line from the final newline
    const diff = textDiffView(text(this.current.code), text(input.code), {
      label: `Changes to version ${this.current.version}`,
      same: "No changes: the code is the same as the saved version.",
      testid: "library-diff",
    });
    return [h("div", { class: "tool-label", text: `Changes to version ${this.current.version}` }), diff];
  }

  /** The version saved now, read once (404: a new function). */
  async fetchCurrent(ctx) {
    const missing = "The server did not say where the library is.";
    this.currentError = await readOnce(this, ctx.desc.libraryUrl, missing, (result) => {
      const versions = result.ok && result.data && Array.isArray(result.data.versions) ? result.data.versions : null;
      if (result.status === 404 && result.data && result.data.error && result.data.error.code === "function_not_found") this.current = null;
      else if (versions && versions.length) this.current = { version: versions.at(-1).version, code: String(versions.at(-1).code) };
      else return `The saved version could not be read: ${errorMessage(result.data, result.status)}`;
      return null;
    });
    this.update();
  }

  approvedCard(ctx) {
    const part = ctx.part;
    const items = this.approvedHead(ctx);
    const output = part && part.state === "output-available" ? part.output : null;
    if (output && output.saved === true) {
      items.push(h("p", { class: "widget-result widget-result-ok", "data-testid": "library-saved", text: `Saved ${String(output.name)} as version ${String(output.version)}.` }));
    } else if (output) {
      items.push(...this.labelled("Result", pretty(output)));
    } else if (part && part.state === "output-error") {
      items.push(h("p", { class: "widget-error", text: `Not saved: ${part.errorText}` }));
    }
    items.push(...this.messages());
    return items;
  }
}

/** GET `url` (same origin only) once for `widget`, with `widget.fetching` set meanwhile;
 *  `accept(result)` stores what it needs and returns an error text, or null. Without a
 *  usable URL the error is `missing`; an unreachable server has its own. */
async function readOnce(widget, url, missing, accept) {
  const target = sameOrigin(url);
  if (!target) return missing;
  widget.fetching = true;
  try {
    return accept(await widget.chat.api.json(target));
  } catch (error) {
    return `Could not reach the server: ${error.message}`;
  } finally {
    widget.fetching = false;
  }
}
