// Parkway playground: widgets for client tools (calls the user answers with an output):
// ChoiceWidget (pick one option), ClientWidget (a JSON answer, or Decline) and
// UnsupportedWidget (a render kind this page does not know: the call is settled with
// an error so the agent is not left waiting).
//
// An ES module imported by widgets.js; no build step.

import { h, pretty } from "./playground-base.js";
import { Widget } from "./widget.js";

/** The field a choice's answer puts the option in when the descriptor names none. */
const CHOICE_FIELD = "choice";

/** How a choice card answers, from its descriptor's `answerShape` (the server derives it
 *  from the tool's output schema, widgets_api/answers.py): the option itself, or an
 *  object with the option in one field; without one, {choice: option}. */
function answerField(desc) {
  const shape = desc && desc.answerShape;
  if (shape && shape.as === "value") return null;
  return shape && shape.as === "field" && typeof shape.field === "string" ? shape.field : CHOICE_FIELD;
}

/** The answer to send for `option`. */
function choiceAnswer(desc, option) {
  const field = answerField(desc);
  return field === null ? option : { [field]: option };
}

/** The option an answer holds (whoever sent it), or null. */
function chosenOption(desc, output) {
  if (typeof output === "string") return output;
  const field = answerField(desc) || CHOICE_FIELD;
  return output && typeof output === "object" && typeof output[field] === "string" ? output[field] : null;
}

export class ChoiceWidget extends Widget {
  constructor(id, chat) {
    super(id, "choice", chat);
  }

  title(ctx) {
    const question = ctx.input && typeof ctx.input.question === "string" ? ctx.input.question : null;
    return question || `${ctx.toolName}: pick one`;
  }

  state(ctx) {
    return this.localState(ctx) || this.endedState(ctx) || "pending";
  }

  draw(ctx, state) {
    if (state === "answered") {
      const output = ctx.outcome && ctx.outcome.output;
      const chosen = chosenOption(ctx.desc, output);
      const choice = chosen === null ? pretty(output) : chosen;
      // The same words live, after a reload and in another tab of the same person (the
      // notice says when it was answered elsewhere).
      return [this.head(ctx, "Answered"), h("p", { class: "widget-result widget-result-ok", text: `You chose “${choice}”` }), ...this.messages()];
    }
    if (state === "ended" || state === "declined" || state === "failed") return this.endedCard(ctx, state);
    if (state === "submitting" || state === "queued") {
      const choice = chosenOption(ctx.desc, ctx.answer.patch.output);
      return [this.head(ctx, "Answered"), h("p", { class: "widget-result", text: `You chose “${choice}”` }), this.queuedCard(ctx, state), ...this.messages()];
    }
    const options = ctx.input && Array.isArray(ctx.input.options) ? ctx.input.options.filter((o) => typeof o === "string") : [];
    return [
      this.head(ctx, "Choice"),
      this.description(ctx),
      h(
        "div",
        { class: "widget-actions", role: "group", "aria-label": "Options" },
        options.map((option) =>
          h("button", { type: "button", class: "button button-option", "data-action": "choose", "data-value": option, disabled: this.busy, onclick: () => this.choose(option) }, option),
        ),
        this.deadline(ctx),
      ),
      ...this.messages(),
    ];
  }

  choose(option) {
    this.error = "";
    this.answer({ state: "output-available", output: choiceAnswer(this.ctx().desc, option) }, { intent: "output" });
  }
}

/** The generic client-tool widget: a JSON editor for the output, and Decline. The
 *  editor starts from the descriptor's `answerDraft` (a value of the output schema's
 *  shape, widgets_api/answers.py), or `{}`. */
export class ClientWidget extends Widget {
  constructor(id, chat) {
    super(id, "client", chat);
    this.editor = h("textarea", { id: `output-${id}`, "data-field": "output", spellcheck: "false", rows: 5 });
    this.editor.value = "{}";
    this.drafted = false;
  }

  /** Fill the editor from the descriptor's draft, once (later draws keep what was typed). */
  startDraft(ctx) {
    if (this.drafted) return;
    this.drafted = true;
    if (!ctx.desc || !Object.hasOwn(ctx.desc, "answerDraft")) return;
    this.editor.value = JSON.stringify(ctx.desc.answerDraft, null, 2);
    this.editor.rows = Math.min(12, Math.max(5, this.editor.value.split("\n").length));
  }

  title(ctx) {
    return ctx.toolName;
  }

  userLine(ctx) {
    return `The agent asks this app for an answer (the ${ctx.toolName} tool). Answer in JSON, or decline.`;
  }

  state(ctx) {
    return this.localState(ctx) || this.endedState(ctx) || "pending";
  }

  draw(ctx, state) {
    if (state === "answered") {
      return [this.head(ctx, "Answered"), h("p", { class: "widget-result widget-result-ok", text: this.answeredHere() ? "Answer sent ✓" : "Answered ✓" }), h("pre", { class: "json", "aria-label": "Output", text: pretty(ctx.outcome.output) }), ...this.messages()];
    }
    if (state === "ended" || state === "declined" || state === "failed") return this.endedCard(ctx, state);
    if (state === "submitting" || state === "queued") return [this.head(ctx, "Answered"), this.queuedCard(ctx, state), ...this.messages()];
    this.startDraft(ctx);
    return [
      this.head(ctx, "Needs your answer"),
      this.description(ctx),
      h("div", { class: "tool-label", text: "Request" }),
      h("pre", { class: "json", "aria-label": "Input", text: pretty(ctx.input) }),
      h("label", { class: "widget-field", for: this.editor.id }, "Your answer (JSON)", this.editor),
      h(
        "div",
        { class: "widget-actions" },
        h("button", { type: "button", class: "button button-primary", "data-action": "submit", disabled: this.busy, onclick: () => this.submit() }, "Send answer"),
        h("button", { type: "button", class: "button", "data-action": "decline", disabled: this.busy, onclick: () => this.decline() }, "Decline"),
        this.deadline(ctx),
      ),
      ...this.messages(),
    ];
  }

  submit() {
    let output;
    try {
      output = JSON.parse(this.editor.value);
    } catch (error) {
      this.error = `Not valid JSON: ${error.message}`;
      this.update();
      return;
    }
    this.error = "";
    this.answer({ state: "output-available", output }, { intent: "output" });
  }

  async decline() {
    // "declined" is not an AI SDK tool state: it is settled through statusUrl.
    const callView = await this.settle({ outcome: "declined" });
    if (!callView) return;
    this.answer({ state: "output-available", output: { status: "declined" } }, { intent: "declined", settled: true, view: callView });
  }
}

/** A call this page has no widget for (a render kind it does not know): say so, and
 *  settle it with an error so the agent is not left waiting. */
export class UnsupportedWidget extends Widget {
  constructor(id, chat) {
    super(id, "unsupported", chat);
    this.tried = false;
  }

  title() {
    return "This app cannot handle that request";
  }

  state(ctx) {
    const ended = this.endedState(ctx);
    if (ended === "ended" || ended === "answered" || ended === "declined") return ended;
    return "unsupported";
  }

  draw(ctx, state) {
    if (state === "ended" || state === "declined") return this.endedCard(ctx, state);
    const kind = ctx.desc.kind || "unknown";
    const settled = ctx.outcome !== null;
    return [
      this.head(ctx, "Unsupported"),
      h("p", { class: "widget-desc", text: `The agent asked for “${ctx.toolName}” with a “${kind}” widget, which this page does not have.` }),
      h("p", { class: "widget-result widget-result-neutral", text: settled ? "The agent was told it could not be done." : "Telling the agent…" }),
      ...this.messages(),
    ];
  }

  update() {
    super.update();
    const ctx = this.ctx();
    if (this.tried || ctx.outcome || ctx.answer || !ctx.view || ctx.view.status !== "pending") return;
    this.tried = true;
    this.report(ctx);
  }

  async report(ctx) {
    const message = `This app cannot handle '${ctx.toolName}' requests (widget kind '${ctx.desc.kind || "unknown"}').`;
    const callView = await this.settle({ outcome: "error", message });
    if (!callView) return;
    this.answer({ state: "output-error", errorText: message }, { intent: "error", settled: true, view: callView });
  }
}
