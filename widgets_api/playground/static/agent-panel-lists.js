// Parkway playground: the agent panel's read-only lists (agent-panel.js): what the
// Playground build kit adds, and the agent's recent revisions. Pure functions of the
// GET /api/agent body; no state.
//
// An ES module imported by agent-panel.js; no build step.

import { h } from "./playground-base.js";

const REVISIONS_SHOWN = 5;
const SECTION_LABELS = { tools: "Tools", skills: "Skills", mcps: "MCP servers", sandbox: "Sandbox permissions" };

export function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** A JSON value in at most 60 characters ("unset" for none). */
export function short(value) {
  const text = value === undefined ? "unset" : JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}…` : text;
}

/** The leaves of an object section, as {path, value}. */
function leaves(value, path, out = []) {
  if (isObject(value) && Object.keys(value).length) {
    for (const [key, inner] of Object.entries(value)) leaves(inner, [...path, key], out);
  } else {
    out.push({ path, value });
  }
  return out;
}

/** Who committed a revision, for "by …"; "" for the server's own revisions (from its
 *  agent file, Python agent or demo, or a reset to it), whose summary says where from. */
function committer(by, you) {
  if (by === "agent-file") return "";
  if (by === "user") return you ? "you" : "a user";
  if (by === "agent") return you ? "the agent, in your chat" : "the agent";
  return typeof by === "string" ? by : "";
}

// What each of the kit's tools lets the agent do, in plain words (others by name; null:
// implied by another).
const KIT_ABILITIES = {
  "platform:commit_config": "change its own template",
  "platform:execute_code": "run code",
  "platform:save_function": "save functions for later",
  "platform:list_functions": null,
  "workflow:__ag__request_connection": "ask to connect your accounts",
};

/** Whether `template` has the execute_code tool (the one that runs code). */
export function runsCode(template) {
  const tools = isObject(template) && Array.isArray(template.tools) ? template.tools : [];
  return tools.some((tool) => isObject(tool) && tool.type === "platform" && tool.op === "execute_code");
}

/** How many tools the build kit `overlay` adds to `template` (the ones it has already
 *  are not counted). */
export function kitToolCount(overlay, template) {
  const identity = globalThis.ParkwayOverlay.entryIdentity;
  const own = new Set((isObject(template) && Array.isArray(template.tools) ? template.tools : []).map((tool) => identity(tool)));
  const kit = overlay && Array.isArray(overlay.tools) ? overlay.tools : [];
  return kit.filter((tool) => !own.has(identity(tool))).length;
}

/** The build kit in one sentence: what the agent can do while it is on. */
export function kitSentence(overlay) {
  if (!overlay) return "This server offers no build kit.";
  const identity = globalThis.ParkwayOverlay.entryIdentity;
  const tools = Array.isArray(overlay.tools) ? overlay.tools : [];
  const permissions = isObject(overlay.sandbox) && isObject(overlay.sandbox.permissions) ? overlay.sandbox.permissions : {};
  const runtime = typeof permissions.max_runtime_s === "number" ? ` (up to ${permissions.max_runtime_s} s a run)` : "";
  const abilities = [];
  for (const tool of tools) {
    const id = identity(tool) || "";
    const plain = id in KIT_ABILITIES ? KIT_ABILITIES[id] : `use ${id.replace(/^[a-z]+:/, "") || "another tool"}`;
    if (plain) abilities.push(id === "platform:execute_code" ? plain + runtime : plain);
  }
  if (!abilities.length) return "While on, new turns run with the kit laid over your template. Commits never include it.";
  const list = abilities.length > 1 ? `${abilities.slice(0, -1).join(", ")} and ${abilities.at(-1)}` : abilities[0];
  return `While on, new turns run with the kit laid over your template, so the agent can also ${list}. Commits never include it.`;
}

/** What the build kit `overlay` adds, section by section, each entry tagged as removed
 *  on commit. */
export function kitGroups(overlay) {
  if (!overlay) return [h("p", { class: "panel-note", text: "This server offers no build kit." })];
  const identity = globalThis.ParkwayOverlay.entryIdentity;
  const groups = [];
  for (const [key, value] of Object.entries(overlay)) {
    let items;
    if (Array.isArray(value)) {
      items = value.map((entry) => (key === "skills" && isObject(entry) && typeof entry.name === "string" ? entry.name : identity(entry) || "(an entry without identity)"));
    } else {
      // Under its section's heading, a setting is named by its path inside the section.
      items = leaves(value, []).map(({ path, value: leaf }) => `${path.join(".") || key}: ${short(leaf)}`);
    }
    if (!items.length) continue;
    groups.push(
      h("div", { class: "kit-group" }, h("div", { class: "tool-label", text: SECTION_LABELS[key] || key })),
      h(
        "ul",
        { class: "kit-items" },
        items.map((item) => h("li", { class: "kit-item", "data-testid": "kit-item" }, h("code", { text: item }), h("span", { class: "tag-removed", text: "Removed on commit" }))),
      ),
    );
  }
  return groups;
}

function byline(who) {
  return who ? [h("span", { class: "revision-by", text: `by ${who}` })] : [];
}

/** The latest revisions, newest first. */
export function revisionItems(revisions) {
  const shown = Array.isArray(revisions) ? revisions.slice(0, REVISIONS_SHOWN) : [];
  return shown.map((revision) =>
    h(
      "li",
      { class: "revision", "data-version": revision.version },
      h("span", { class: "revision-version", text: `v${revision.version}` }),
      h("span", { class: "revision-summary", text: revision.summary || "(no summary)" }),
      ...byline(committer(revision.committedBy, revision.committedByYou)),
    ),
  );
}
