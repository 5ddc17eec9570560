// Parkway playground: a form built from an MCP elicitation schema (the requestedSchema
// of an `elicitation/create` request, shown by the "mcp-form" widget, mcp-widgets.js).
//
// MCP restricts these schemas to a flat object of primitive properties: strings (with
// an optional format email, uri, date or date-time, and minLength/maxLength), numbers
// and integers (minimum/maximum), booleans, single choices (`enum`, with optional
// `enumNames`, or `oneOf` of {const, title}), multiple choices (an array whose `items`
// are an `enum` or an `anyOf`/`oneOf` of {const, title}, with minItems/maxItems), each
// with an optional title, description and default. A property of another shape is
// shown as plain text input.
//
// The schema, its titles and descriptions come from the MCP server: untrusted text.
// Everything here is put on the page as text (textContent, attribute values), never
// parsed as HTML.
//
// An ES module imported by mcp-widgets.js; no build step.

import { h } from "./playground-base.js";

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function text(value) {
  return typeof value === "string" ? value : "";
}

/** The options of a single or multiple choice: [{value, label}], or null. */
function optionsOf(prop) {
  if (Array.isArray(prop.enum)) {
    const names = Array.isArray(prop.enumNames) ? prop.enumNames : [];
    return prop.enum.map((value, i) => ({ value: String(value), label: text(names[i]) || String(value) }));
  }
  const listed = Array.isArray(prop.oneOf) ? prop.oneOf : Array.isArray(prop.anyOf) ? prop.anyOf : null;
  if (!listed) return null;
  const options = listed.filter((o) => isObject(o) && o.const !== undefined);
  return options.map((o) => ({ value: String(o.const), label: text(o.title) || String(o.const) }));
}

/** What kind of control a property gets. */
function kindOf(prop) {
  if (prop.type === "array" && isObject(prop.items) && optionsOf(prop.items)) return "multi";
  if (optionsOf(prop)) return "choice";
  if (prop.type === "boolean") return "boolean";
  if (prop.type === "number" || prop.type === "integer") return "number";
  return "string";
}

const INPUT_TYPES = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };

/** One property's control, its label, hint and error line. */
class Field {
  constructor(baseId, name, prop, required) {
    this.name = name;
    this.prop = prop;
    this.required = required;
    this.kind = kindOf(prop);
    this.id = baseId;
    this.title = text(prop.title) || name;
    this.error = h("p", { class: "field-error", id: `${baseId}-error`, "data-testid": "field-error", hidden: true });
    const hint = text(prop.description);
    this.hint = hint ? h("p", { class: "field-hint", id: `${baseId}-hint`, text: hint }) : null;
    this.describedBy = [this.hint ? `${baseId}-hint` : null, `${baseId}-error`].filter(Boolean).join(" ");
    this.el = this.build();
  }

  label() {
    return [this.title, this.required ? h("span", { class: "field-required", "aria-hidden": "true", text: " *" }) : null];
  }

  build() {
    const prop = this.prop;
    const common = { id: this.id, "data-name": this.name, "aria-describedby": this.describedBy, "aria-required": this.required ? "true" : null };
    if (this.kind === "multi") {
      const chosen = new Set(Array.isArray(prop.default) ? prop.default.map(String) : []);
      this.boxes = optionsOf(prop.items).map((option, i) =>
        h("input", { type: "checkbox", id: `${this.id}-${i}`, value: option.value, checked: chosen.has(option.value) }),
      );
      const options = optionsOf(prop.items).map((option, i) =>
        h("label", { class: "field-option", for: `${this.id}-${i}` }, this.boxes[i], option.label),
      );
      return h("fieldset", { class: "widget-field mcp-field", "data-name": this.name, "aria-describedby": this.describedBy }, h("legend", {}, this.label()), options, this.hint, this.error);
    }
    if (this.kind === "boolean") {
      this.input = h("input", { type: "checkbox", ...common, checked: prop.default === true });
      return h("div", { class: "widget-field mcp-field mcp-check", "data-name": this.name }, h("label", { for: this.id }, this.input, this.label()), this.hint, this.error);
    }
    if (this.kind === "choice") {
      const placeholder = h("option", { value: "", text: "Choose…" });
      const options = optionsOf(prop).map((option) => h("option", { value: option.value, text: option.label }));
      this.input = h("select", common, placeholder, options);
      if (prop.default !== undefined) this.input.value = String(prop.default);
    } else if (this.kind === "number") {
      const step = prop.type === "integer" ? "1" : "any";
      this.input = h("input", { type: "number", step, min: prop.minimum, max: prop.maximum, ...common });
      if (typeof prop.default === "number") this.input.value = String(prop.default);
    } else {
      const type = INPUT_TYPES[prop.format] || "text";
      this.input = h("input", { type, maxlength: prop.maxLength, ...common });
      if (typeof prop.default === "string") this.input.value = prop.default;
    }
    return h("div", { class: "widget-field mcp-field", "data-name": this.name }, h("label", { for: this.id }, this.label()), this.input, this.hint, this.error);
  }

  /** The field's value for the answer ({value} or {} when left out) and its error. */
  read() {
    const prop = this.prop;
    if (this.kind === "boolean") return { value: this.input.checked, error: "" };
    if (this.kind === "multi") {
      const value = this.boxes.filter((b) => b.checked).map((b) => b.value);
      if (this.required && !value.length) return { error: "Choose at least one." };
      if (typeof prop.minItems === "number" && value.length < prop.minItems) return { error: `Choose at least ${prop.minItems}.` };
      if (typeof prop.maxItems === "number" && value.length > prop.maxItems) return { error: `Choose at most ${prop.maxItems}.` };
      return value.length || this.required ? { value, error: "" } : { error: "" };
    }
    const raw = this.input.value;
    if (raw.trim() === "") return { error: this.required ? "This field is required." : "" };
    if (this.kind === "choice") return { value: raw, error: "" };
    if (this.kind === "number") {
      const value = Number(raw);
      if (!Number.isFinite(value)) return { error: "Enter a number." };
      if (prop.type === "integer" && !Number.isInteger(value)) return { error: "Enter a whole number." };
      if (typeof prop.minimum === "number" && value < prop.minimum) return { error: `Enter at least ${prop.minimum}.` };
      if (typeof prop.maximum === "number" && value > prop.maximum) return { error: `Enter at most ${prop.maximum}.` };
      return { value, error: "" };
    }
    const length = [...raw].length;
    if (typeof prop.minLength === "number" && length < prop.minLength) return { error: `Enter at least ${prop.minLength} characters.` };
    if (typeof prop.maxLength === "number" && length > prop.maxLength) return { error: `Enter at most ${prop.maxLength} characters.` };
    return this.readFormat(raw);
  }

  readFormat(raw) {
    switch (this.prop.format) {
      case "email":
        return EMAIL.test(raw) ? { value: raw, error: "" } : { error: "Enter an email address, like name@example.com." };
      case "uri":
        try {
          const url = new URL(raw);
          if (url.protocol && /^[a-z][a-z0-9+.-]*:$/i.test(url.protocol)) return { value: raw, error: "" };
        } catch {
          // not a URL
        }
        return { error: "Enter a full address, like https://example.com." };
      case "date": {
        const m = DATE.exec(raw);
        const day = m ? new Date(Date.UTC(+m[1], +m[2] - 1, +m[3])) : null;
        const real = day && day.getUTCFullYear() === +m[1] && day.getUTCMonth() === +m[2] - 1 && day.getUTCDate() === +m[3];
        return real ? { value: raw, error: "" } : { error: "Enter a date (YYYY-MM-DD)." };
      }
      case "date-time": {
        const when = new Date(raw);
        // datetime-local is the person's local time; the answer is RFC 3339 (UTC).
        return Number.isNaN(when.getTime()) ? { error: "Enter a date and time." } : { value: when.toISOString(), error: "" };
      }
      default:
        return { value: raw, error: "" };
    }
  }

  showError(message) {
    this.error.textContent = message;
    this.error.hidden = !message;
    const controls = this.kind === "multi" ? this.boxes : [this.input];
    for (const control of controls) {
      if (message) control.setAttribute("aria-invalid", "true");
      else control.removeAttribute("aria-invalid");
    }
  }

  focus() {
    (this.kind === "multi" ? this.boxes[0] : this.input).focus();
  }

  /** The value as the person reads it in the review. */
  shown(value) {
    if (value === undefined) return "—";
    if (this.kind === "boolean") return value ? "Yes" : "No";
    const options = this.kind === "multi" ? optionsOf(this.prop.items) : this.kind === "choice" ? optionsOf(this.prop) : null;
    const label = (v) => (options ? (options.find((o) => o.value === v) || { label: v }).label : String(v));
    if (Array.isArray(value)) return value.length ? value.map(label).join(", ") : "—";
    return label(value);
  }
}

/** The form of one request: its fields, built once (typed values survive redraws). */
export class ElicitationForm {
  constructor(baseId, schema) {
    const props = isObject(schema) && isObject(schema.properties) ? schema.properties : {};
    const required = new Set(Array.isArray(schema && schema.required) ? schema.required : []);
    this.fields = Object.entries(props)
      .filter(([, prop]) => isObject(prop))
      .map(([name, prop], i) => new Field(`${baseId}-f${i}`, name, prop, required.has(name)));
  }

  elements() {
    return this.fields.length ? this.fields.map((f) => f.el) : [h("p", { class: "widget-desc", text: "No details are asked: answering sends an empty form." })];
  }

  /** Check every field, marking the bad ones. Returns {content, invalid}: the answer's
   *  content, and the fields in error (the first one to focus). */
  check() {
    const content = {};
    const invalid = [];
    for (const field of this.fields) {
      const { value, error } = field.read();
      field.showError(error);
      if (error) invalid.push(field);
      else if (value !== undefined) content[field.name] = value;
    }
    return { content, invalid };
  }

  /** The review of `content`: a definition list of titles and values, as text. */
  review(content) {
    return h(
      "dl",
      { class: "mcp-review" },
      this.fields.flatMap((f) => [h("dt", { text: f.title }), h("dd", { "data-name": f.name, text: f.shown(content[f.name]) })]),
    );
  }
}
