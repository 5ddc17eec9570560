// Parkway playground: the AI SDK UI message stream on the page's side.
//
//   - tool-part helpers: which parts are tool calls, and which of them are resolved;
//   - readChunks: an SSE response body as the JSON chunks it carries;
//   - StreamRun: the reducer that applies one response's chunks to the chat's messages.
//
// An ES module imported by chat.js, view.js and the widget modules; no build step.

import { newId } from "./playground-base.js";

const RESOLVED = new Set(["output-available", "output-error", "output-denied", "approval-responded"]);

export function toolNameOf(part) {
  if (part.type === "dynamic-tool") return typeof part.toolName === "string" ? part.toolName : null;
  if (typeof part.type === "string" && part.type.startsWith("tool-")) return part.type.slice(5);
  return null;
}

export function isToolPart(part) {
  return toolNameOf(part) !== null;
}

export function isResolved(part) {
  return RESOLVED.has(part.state) && !part.preliminary;
}

/** The parts after the last step-start of a message (the AI SDK's "last step"). */
export function lastStep(message) {
  let start = -1;
  message.parts.forEach((part, index) => {
    if (part.type === "step-start") start = index;
  });
  return message.parts.slice(start + 1);
}

/** The JSON chunks of an SSE body, as they arrive. Comments, `event:`/`id:` fields and
 *  `[DONE]` are skipped; several `data:` lines of one event are joined with "\n". */
export async function* readChunks(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const events = function* (final) {
    // A "\r" at the very end may be the first half of "\r\n": keep it for later.
    let text = buffer;
    let held = "";
    if (!final && text.endsWith("\r")) {
      held = "\r";
      text = text.slice(0, -1);
    }
    text = text.replace(/\r\n?/g, "\n");
    const blocks = text.split("\n\n");
    buffer = (final ? "" : blocks.pop()) + held;
    for (const block of blocks) {
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""));
      if (!data.length) continue;
      const payload = data.join("\n");
      if (payload === "[DONE]") continue;
      yield JSON.parse(payload);
    }
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    yield* events(false);
  }
  buffer += decoder.decode();
  yield* events(true);
}

/** Applies the chunks of one response to the chat's messages, the way the AI SDK's
 *  `processUIMessageStream` does. `replay`: the response rebuilds its message from the
 *  start (GET .../stream), so `start` clears the parts it already had. `chat` is the
 *  Chat (chat.js): its messages, descriptors and code calls, and `committedRevision`
 *  for a `data-committed-revision` part. */
export class StreamRun {
  constructor(chat, { replay }) {
    this.chat = chat;
    this.replay = replay;
    this.message = null;
    this.texts = new Map();
    this.error = null;
    this.finishReason = null;
    this.codeCallIds = new Set(); // code calls whose brokered tool calls this response carried
  }

  /** A `data-code-tool-call` part: one tool call a program made, naming its code call
   *  (`toolCallId`). They are kept as a list per code call, started over when a response
   *  carries them again (a replay), and kept beside the messages: GET /api/chats/{id}
   *  does not carry them. */
  codeToolCall(toolCallId, data) {
    if (!this.codeCallIds.has(toolCallId)) {
      this.codeCallIds.add(toolCallId);
      this.chat.codeCalls.set(toolCallId, []);
    }
    this.chat.codeCalls.get(toolCallId).push(data);
  }

  ensureMessage(messageId) {
    if (this.message) return this.message;
    const messages = this.chat.messages;
    let message = null;
    if (messageId) message = messages.find((m) => m.role === "assistant" && m.id === messageId);
    if (!message && !messageId && messages.length && messages.at(-1).role === "assistant") {
      message = messages.at(-1);
    }
    if (message && this.replay) message.parts = [];
    if (!message) {
      message = { id: messageId || newId("msg"), role: "assistant", parts: [] };
      messages.push(message);
    }
    this.message = message;
    return message;
  }

  toolPart(toolCallId) {
    const parts = this.ensureMessage().parts;
    for (let i = parts.length - 1; i >= 0; i -= 1) {
      if (isToolPart(parts[i]) && parts[i].toolCallId === toolCallId) return parts[i];
    }
    return null;
  }

  newToolPart(chunk) {
    const part = chunk.dynamic
      ? { type: "dynamic-tool", toolName: chunk.toolName, toolCallId: chunk.toolCallId }
      : { type: `tool-${chunk.toolName}`, toolCallId: chunk.toolCallId };
    if (chunk.providerExecuted) part.providerExecuted = true;
    if (chunk.title) part.title = chunk.title;
    this.ensureMessage().parts.push(part);
    return part;
  }

  apply(chunk) {
    const type = chunk.type;
    if (type === "start") {
      this.ensureMessage(chunk.messageId);
      if (chunk.messageMetadata) this.message.metadata = { ...this.message.metadata, ...chunk.messageMetadata };
      return;
    }
    const parts = this.ensureMessage().parts;
    switch (type) {
      case "start-step":
        parts.push({ type: "step-start" });
        break;
      case "finish-step":
      case "abort":
        break;
      case "finish":
        this.finishReason = chunk.finishReason || null;
        // The model that answered and the message's token totals so far.
        if (chunk.messageMetadata) this.message.metadata = { ...this.message.metadata, ...chunk.messageMetadata };
        break;
      case "error":
        this.error = String(chunk.errorText || "The run failed.");
        break;
      case "message-metadata":
        this.message.metadata = { ...this.message.metadata, ...chunk.messageMetadata };
        break;
      case "text-start":
      case "reasoning-start": {
        const part = { type: type === "text-start" ? "text" : "reasoning", text: "", state: "streaming" };
        parts.push(part);
        this.texts.set(`${part.type}:${chunk.id}`, part);
        break;
      }
      case "text-delta":
      case "reasoning-delta": {
        const part = this.texts.get(`${type.startsWith("text") ? "text" : "reasoning"}:${chunk.id}`);
        if (part) part.text += chunk.delta;
        break;
      }
      case "text-end":
      case "reasoning-end": {
        const part = this.texts.get(`${type.startsWith("text") ? "text" : "reasoning"}:${chunk.id}`);
        if (part) part.state = "done";
        break;
      }
      case "tool-input-start": {
        const part = this.toolPart(chunk.toolCallId) || this.newToolPart(chunk);
        part.state = "input-streaming";
        part.rawInput = "";
        break;
      }
      case "tool-input-delta": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.rawInput = (part.rawInput || "") + chunk.inputTextDelta;
        try {
          part.input = JSON.parse(part.rawInput);
        } catch {
          // partial JSON: keep the last complete value
        }
        break;
      }
      case "tool-input-available":
      case "tool-input-error": {
        const part = this.toolPart(chunk.toolCallId) || this.newToolPart(chunk);
        delete part.rawInput;
        part.input = chunk.input;
        if (type === "tool-input-error") {
          part.state = "output-error";
          part.errorText = chunk.errorText;
        } else {
          part.state = "input-available";
        }
        break;
      }
      case "tool-approval-request": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.state = "approval-requested";
        part.approval = { id: chunk.approvalId };
        break;
      }
      case "tool-approval-response": {
        const part = this.message.parts.find((p) => p.approval && p.approval.id === chunk.approvalId);
        if (!part) break;
        part.state = "approval-responded";
        part.approval = { ...part.approval, approved: chunk.approved };
        if (chunk.reason) part.approval.reason = chunk.reason;
        break;
      }
      case "tool-output-available": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.state = "output-available";
        part.output = chunk.output;
        delete part.errorText;
        if (chunk.preliminary) part.preliminary = true;
        else delete part.preliminary;
        if (part.approval) part.approval = { ...part.approval, approved: true };
        break;
      }
      case "tool-output-error": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.state = "output-error";
        part.errorText = chunk.errorText;
        break;
      }
      case "tool-output-denied": {
        const part = this.toolPart(chunk.toolCallId);
        if (!part) break;
        part.state = "output-denied";
        part.approval = { ...(part.approval || {}), approved: false };
        break;
      }
      case "reset-step": {
        let start = -1;
        parts.forEach((p, i) => {
          if (p.type === "step-start") start = i;
        });
        parts.splice(start + 1);
        break;
      }
      default:
        if (typeof type === "string" && type.startsWith("data-")) {
          if (chunk.transient) break;
          if (type === "data-code-tool-call") {
            // the code call's id is in the data; each brokered call's part has its own id
            const codeCallId = chunk.data && (chunk.data.toolCallId || chunk.id);
            if (typeof codeCallId === "string") this.codeToolCall(codeCallId, chunk.data);
            break;
          }
          const existing = chunk.id !== undefined ? parts.find((p) => p.type === type && p.id === chunk.id) : null;
          if (existing) existing.data = chunk.data;
          else parts.push(chunk.id !== undefined ? { type, id: chunk.id, data: chunk.data } : { type, data: chunk.data });
          if (type === "data-parkway-widget" && chunk.data && typeof chunk.id === "string") {
            this.chat.descriptors.set(chunk.id, chunk.data);
          }
          if (type === "data-committed-revision" && chunk.data) this.chat.committedRevision(chunk.data);
        }
        // Sources, files and chunk types this page does not show are left out.
        break;
    }
  }
}
