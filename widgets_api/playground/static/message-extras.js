// Parkway playground: the parts of an assistant message around its text and widgets.
//
//   - the model's reasoning: a disclosure, closed by default, filled live as it streams;
//   - a tool call whose input the model is still writing (`tool-input-start` /
//     `tool-input-delta`): a compact "Preparing <tool>…" placeholder with the partial
//     input text. It has no buttons: nothing is answerable before `tool-input-available`;
//   - the footer: the model that answered and the tokens the message used so far (the
//     message's `metadata`, from `finish.messageMetadata` or GET /api/chats/{id}).
//
// Everything the model wrote goes into the page through textContent only.
// An ES module imported by view.js; no build step.

import { h } from "./playground-base.js";

const COUNT = new Intl.NumberFormat("en");

// -- reasoning -------------------------------------------------------------------------

/** A reasoning part's element: <details> (closed) with the text inside. */
export function reasoningElement(key) {
  return h(
    "details",
    { class: "reasoning", "data-key": key, "data-testid": "reasoning" },
    h(
      "summary",
      {},
      h("span", { class: "reasoning-label", text: "Reasoning" }),
      h("span", { class: "reasoning-status", "aria-live": "polite" }),
    ),
    h("div", { class: "reasoning-text", "data-field": "reasoning" }),
  );
}

/** Bring a reasoning element up to date with its part. The open/closed state is the
 *  user's: it is never touched here, so a disclosure opened mid-stream stays open. */
export function updateReasoning(el, part) {
  const text = typeof part.text === "string" ? part.text : "";
  const body = el.querySelector(".reasoning-text");
  if (body.textContent !== text) body.textContent = text;
  const streaming = part.state === "streaming";
  el.dataset.state = streaming ? "streaming" : "done";
  el.querySelector(".reasoning-status").textContent = streaming ? "thinking…" : "";
}

// -- a tool call still being written ----------------------------------------------------

/** Show (or take away) the "Preparing <tool>…" placeholder in a tool block. Returns
 *  true while the call's input is still streaming: the caller then shows nothing else
 *  for the call (no details, no widget). */
export function updatePreparing(block, part, toolName) {
  let box = block.querySelector(":scope > .tool-preparing");
  if (part.state !== "input-streaming") {
    if (box) box.remove();
    return false;
  }
  if (!box) {
    box = h(
      "div",
      { class: "tool-preparing", role: "status", "data-testid": `preparing-${part.toolCallId}` },
      h("span", { class: "tool-preparing-label" }),
      h("pre", { class: "tool-preparing-input", "data-field": "partial-input" }),
    );
    block.append(box);
  }
  box.querySelector(".tool-preparing-label").textContent = `Preparing ${toolName}…`;
  const input = box.querySelector(".tool-preparing-input");
  const raw = typeof part.rawInput === "string" ? part.rawInput : "";
  if (input.textContent !== raw) input.textContent = raw;
  input.hidden = !raw;
  // Anything else the block holds (a widget drawn before a replay restarted the call)
  // goes until the input is complete again.
  for (const child of [...block.children]) {
    if (child !== box && child.tagName !== "DETAILS") child.remove();
  }
  return true;
}

// -- the footer ------------------------------------------------------------------------

function count(value) {
  return typeof value === "number" && Number.isFinite(value) && value >= 0 ? COUNT.format(value) : null;
}

/** "anthropic:claude-sonnet-4-6 · 120 in · 45 out · 12 reasoning", from a message's
 *  metadata; "" when it names neither a model nor any usage (the scripted model). */
export function usageLine(metadata) {
  if (!metadata || typeof metadata !== "object") return "";
  const bits = [];
  if (typeof metadata.model === "string" && metadata.model) bits.push(metadata.model);
  const usage = metadata.usage && typeof metadata.usage === "object" ? metadata.usage : {};
  const input = count(usage.inputTokens);
  const output = count(usage.outputTokens);
  const reasoning = count(usage.reasoningTokens);
  if (input !== null) bits.push(`${input} in`);
  if (output !== null) bits.push(`${output} out`);
  if (reasoning !== null && usage.reasoningTokens > 0) bits.push(`${reasoning} reasoning`);
  return bits.join(" · ");
}

/** The footer element for an assistant message (reusing `existing`), or null when there
 *  is nothing to say. */
export function messageFooter(existing, message) {
  if (message.role !== "assistant") return null;
  const line = usageLine(message.metadata);
  if (!line) return null;
  const el = existing || h("div", { class: "message-footer", "data-key": "footer", "data-testid": "message-footer" });
  if (el.textContent !== line) el.textContent = line;
  const total = count(message.metadata.usage && message.metadata.usage.totalTokens);
  if (total !== null) el.title = `${total} tokens in total for this message`;
  else el.removeAttribute("title");
  return el;
}
