// Parkway playground: how Code Mode's values look on the page. Pure functions, no state.
//
//   - codeView: a program as numbered lines, either the server's highlighted lines
//     (descriptor `codeLines`: HTML whose text widgets_api/highlight.py escaped, the only
//     server HTML the page inserts) or plain text (an edited program, a saved version);
//   - artifactView: an artifact reference {artifact_id, bytes, media_type, preview}: its
//     size, a short preview and a Download link;
//   - codeRunView: an execute_code result {status, stdout, stderr, result, wall_ms, …};
//   - outputView: any tool output, drawn by its shape as one of those or as JSON;
//   - brokeredView: the tool calls a program made (`data-code-tool-call` parts);
//   - sandboxView and limitsText: the isolation and limits a code review shows.
//
// An ES module imported by view.js, code-widgets.js and code-panel.js; no build step.

import { appUrl, h, pretty } from "./playground-base.js";

const COUNT = new Intl.NumberFormat("en");
const MIB = 2 ** 20;
const PREVIEW_CHARS = 400;
const CALL_CHARS = 160;
// A code run's status -> its badge's tone (playground.css `.badge-*`).
const STATUS_TONES = { ok: "ok", error: "bad", timeout: "wait", output_limit: "bad", killed: "bad", unavailable: "neutral" };

function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** "812 bytes", or "58.6 KiB (60,012 bytes)": the exact count is always there. */
/** The tool calls each code call's program made, from a loaded chat's messages (the
 *  `data-code-tool-call` parts GET /api/chats/{id} keeps with the code call's result). */
export function codeCallsOf(messages) {
  const found = new Map();
  for (const message of messages) {
    for (const part of message.parts || []) {
      const id = part.type === "data-code-tool-call" && part.data ? part.data.toolCallId : null;
      if (typeof id === "string") found.set(id, [...(found.get(id) || []), part.data]);
    }
  }
  return found;
}

export function formatBytes(n) {
  if (!Number.isFinite(n) || n < 0) return "unknown size";
  if (n < 1024) return `${COUNT.format(n)} byte${n === 1 ? "" : "s"}`;
  const units = ["KiB", "MiB", "GiB"];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(1)} ${units[unit]} (${COUNT.format(n)} bytes)`;
}

function formatMs(ms) {
  if (!Number.isFinite(ms)) return "";
  return ms < 1000 ? `${ms.toFixed(1)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

function shorten(text, limit) {
  return text.length > limit ? `${text.slice(0, limit)}…` : text;
}

/** A JSON value on one line, cut to `limit` characters. */
function compact(value, limit = CALL_CHARS) {
  const text = value === undefined ? "" : JSON.stringify(value);
  return shorten(text === undefined ? String(value) : text, limit);
}

/** A tool output that is an artifact reference (runner/store/artifacts.py `is_reference`). */
export function isArtifactRef(value) {
  return isPlainObject(value) && typeof value.artifact_id === "string" && Number.isInteger(value.bytes);
}

/** A tool output shaped like an execute_code result. */
export function isCodeRun(value) {
  return isPlainObject(value) && typeof value.status === "string" && typeof value.wall_ms === "number" && typeof value.stdout === "string";
}

export function artifactUrl(chatId, artifactId) {
  return appUrl(`api/chats/${encodeURIComponent(chatId)}/artifacts/${encodeURIComponent(artifactId)}`);
}

/** The program as numbered lines. `lines`: the lines' HTML (`html: true`, the
 *  descriptor's codeLines only) or their text. */
export function codeView(lines, { html = false, label = "Program", testid = "code-view" } = {}) {
  const root = h("div", { class: "code-view", role: "group", "aria-label": label, "data-testid": testid });
  (Array.isArray(lines) ? lines : []).forEach((line, index) => {
    const text = h("span", { class: "code-text" });
    if (html) text.innerHTML = typeof line === "string" ? line : ""; // escaped by the server
    else text.textContent = String(line);
    root.append(h("div", { class: "code-line" }, h("span", { class: "code-ln", "aria-hidden": "true", text: String(index + 1) }), text));
  });
  return root;
}

/** A program's text as codeView lines. */
export function textLines(code) {
  const lines = String(code ?? "").split("\n");
  if (lines.length > 1 && lines.at(-1) === "") lines.pop();
  return lines;
}

/** An artifact reference: id, size, media type, the start of its content and its
 *  download link. `label` says what it is ("Artifact", "The whole stdout"). */
export function artifactView(ref, chatId, label = "Artifact") {
  const size = ref.bytes;
  const cut = Number.isInteger(ref.total_bytes) && ref.total_bytes > size;
  const head = h(
    "div",
    { class: "artifact-head" },
    h("span", { class: "artifact-label", text: label }),
    h("code", { class: "artifact-id", text: ref.artifact_id }),
    h("span", { class: "artifact-size", "data-field": "artifact-size", "data-bytes": String(size), text: formatBytes(size) }),
    cut ? h("span", { class: "artifact-cut", text: `cut: ${formatBytes(ref.total_bytes)} were printed` }) : null,
    typeof ref.media_type === "string" ? h("span", { class: "artifact-type", text: ref.media_type }) : null,
    chatId
      ? h("a", { class: "artifact-download", href: artifactUrl(chatId, ref.artifact_id), download: ref.artifact_id, "data-action": "download", text: "Download" })
      : null,
  );
  const preview = typeof ref.preview === "string" && ref.preview ? h("pre", { class: "artifact-preview", "data-field": "artifact-preview", text: shorten(ref.preview, PREVIEW_CHARS) }) : null;
  return h("div", { class: "artifact", "data-testid": "artifact", "data-artifact-id": ref.artifact_id }, head, preview);
}

function stream(label, text, field) {
  if (!text) return [];
  return [h("div", { class: "tool-label", text: label }), h("pre", { class: `code-stream code-${field}`, "data-field": field, text })];
}

/** An execute_code result: status, wall time, message, result, stdout, stderr. */
export function codeRunView(run, chatId) {
  const status = run.status;
  const calls = Number.isInteger(run.tool_calls) && run.tool_calls > 0 ? `${run.tool_calls} tool call${run.tool_calls === 1 ? "" : "s"}` : null;
  const items = [
    h(
      "div",
      { class: "code-run-head" },
      h("span", { class: `badge badge-${STATUS_TONES[status] || "neutral"} code-status`, "data-testid": "code-status", text: status }),
      h("span", { class: "code-wall", "data-field": "wall", text: formatMs(run.wall_ms) }),
      calls ? h("span", { class: "code-calls", text: calls }) : null,
    ),
  ];
  if (typeof run.message === "string" && run.message) items.push(h("p", { class: "code-message", "data-field": "message", text: run.message }));
  if (run.result !== null && run.result !== undefined) {
    items.push(h("div", { class: "tool-label", text: "Result" }), h("pre", { class: "json", "data-field": "result", text: pretty(run.result) }));
  }
  items.push(...stream("Output (stdout)", run.stdout, "stdout"));
  if (isArtifactRef(run.stdout_artifact)) items.push(artifactView(run.stdout_artifact, chatId, "The whole stdout"));
  items.push(...stream("Errors (stderr)", run.stderr, "stderr"));
  return h("div", { class: "code-run", "data-testid": "code-run", "data-status": status, "data-field": "output" }, items);
}

/** A tool's output, by its shape. */
export function outputView(output, chatId) {
  if (isArtifactRef(output)) {
    const el = artifactView(output, chatId);
    el.dataset.field = "output";
    return el;
  }
  if (isCodeRun(output)) return codeRunView(output, chatId);
  return h("pre", { class: "json", "data-field": "output", text: pretty(output) });
}

/** The tool calls a program made, in order: "called name({…}) → {…}". */
export function brokeredView(calls) {
  return h(
    "div",
    { class: "code-tool-calls", "data-testid": "code-tool-calls" },
    h("div", { class: "tool-label", text: "Tool calls made by the code" }),
    h(
      "ol",
      { class: "code-tool-call-list" },
      calls.map((call) => {
        const failed = call.error !== undefined;
        const answer = failed ? `error: ${String(call.error)}` : compact(call.output);
        return h(
          "li",
          { class: "code-tool-call", "data-name": String(call.name), "data-failed": String(failed) },
          h("code", { text: `called ${String(call.name)}(${compact(call.input)})` }),
          h("span", { class: "code-tool-arrow", text: " → " }),
          h("code", { class: failed ? "code-tool-error" : "", text: answer }),
        );
      }),
    ),
  );
}

/** "10 s wall clock · 10 s CPU · 512 MiB memory · 16 processes · 64 MiB disk". A wall
 *  clock over the server's own (`serverLimits`, what GET /api/sandbox shows) says who raised it:
 *  `raisedBy`, else the agent's sandbox permissions. */
export function limitsText(limits, serverLimits = null, raisedBy = null) {
  if (!isPlainObject(limits)) return "unknown";
  const bits = [];
  if (typeof limits.wall_s === "number") {
    const base = isPlainObject(serverLimits) ? serverLimits.wall_s : undefined;
    const raised = typeof base === "number" && limits.wall_s > base ? ` (raised from the server's ${base} s by ${raisedBy || "the agent's sandbox permissions"})` : "";
    bits.push(`${limits.wall_s} s wall clock${raised}`);
  }
  if (typeof limits.cpu_s === "number") bits.push(`${limits.cpu_s} s CPU`);
  if (typeof limits.memory_bytes === "number") bits.push(`${Math.round(limits.memory_bytes / MIB)} MiB memory`);
  if (typeof limits.processes === "number") bits.push(`${limits.processes} processes`);
  if (typeof limits.disk_bytes === "number") bits.push(`${Math.round(limits.disk_bytes / MIB)} MiB disk`);
  return bits.join(" · ");
}

/** Who set the run's wall clock: the build kit when it is on and sets this very value. */
function raiser(limits, kit) {
  return isPlainObject(limits) && isPlainObject(kit) && kit.max_runtime_s === limits.wall_s ? "the build kit" : null;
}

/** What a call's own `limits` ask for ({timeout_s, cpu_s, memory_mb}), or "". */
function askedText(asked) {
  if (!isPlainObject(asked)) return "";
  const bits = [];
  if (typeof asked.timeout_s === "number") bits.push(`${asked.timeout_s} s wall clock`);
  if (typeof asked.cpu_s === "number") bits.push(`${asked.cpu_s} s CPU`);
  if (typeof asked.memory_mb === "number") bits.push(`${asked.memory_mb} MiB memory`);
  return bits.join(" · ");
}

/** Where the program would run: the isolation and the limits, an UNCONFINED badge when
 *  the server runs code without isolation, or why it cannot run code at all. `kit`: the
 *  sandbox permissions the build kit lays over the template while it is on, or null. */
export function sandboxView(sandbox, asked, kit = null) {
  const box = h("div", { class: "code-sandbox", "data-testid": "code-sandbox" });
  if (!isPlainObject(sandbox) || sandbox.available !== true) {
    const reason = isPlainObject(sandbox) && typeof sandbox.reason === "string" && sandbox.reason ? sandbox.reason : "no reason given";
    box.dataset.state = "unavailable";
    box.append(
      h("p", { class: "code-unavailable", role: "alert", "data-testid": "code-unavailable", text: `This server cannot run code: ${/[.!?]$/.test(reason) ? reason : `${reason}.`}` }),
      h("p", { class: "panel-note", text: "Nothing would run: if you approve, the agent is told that code execution is unavailable." }),
    );
    return box;
  }
  const isolation = isPlainObject(sandbox.isolation) ? sandbox.isolation : {};
  const provider = String(isolation.provider || sandbox.provider || "unknown");
  const layers = Array.isArray(isolation.layers) ? isolation.layers.map(String) : [];
  box.dataset.state = sandbox.confined === false ? "unconfined" : "confined";
  if (sandbox.confined === false) {
    box.append(
      h(
        "p",
        { class: "code-unconfined-line" },
        h("span", { class: "code-unconfined", "data-testid": "code-unconfined", text: "UNCONFINED" }),
        h("span", { text: " This server runs code as a plain process with limits only: no isolation from the server's files and network." }),
      ),
    );
  }
  const isolationLine = h("p", { class: "code-isolation", "data-testid": "code-isolation" }, h("span", { class: "code-fact", text: "Isolation" }), h("span", { text: layers.length ? `${provider}: ${layers.join(", ")}` : provider }));
  if (typeof isolation.detail === "string" && isolation.detail) isolationLine.title = isolation.detail;
  box.append(isolationLine, h("p", { class: "code-limits", "data-testid": "code-limits" }, h("span", { class: "code-fact", text: "Limits" }), h("span", { text: limitsText(sandbox.limits, sandbox.serverLimits, raiser(sandbox.limits, kit)) })));
  const lower = askedText(asked);
  if (lower) box.append(h("p", { class: "panel-note", "data-testid": "code-asked-limits", text: `The call asks for ${lower} (it may only lower the limits above).` }));
  return box;
}
