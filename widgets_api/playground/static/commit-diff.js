// Parkway playground: what a `commit_config` call would change, as a line diff.
//
// applyPatch is the browser's copy of runner/agent/commits.py `apply_patch` (the patch merged
// over the committed template with the build-kit merge rules, then `remove_tools`
// dropped by identity), so the approval shows exactly what the server would commit.
// The diff is a plain LCS over the lines of the two pretty-printed JSON texts, with
// unchanged stretches collapsed to a few lines of context; textDiffView draws the same
// diff of two texts (a saved function against its new code, code-widgets.js).

import { h, pretty } from "./playground-base.js";

const CONTEXT = 2;
// Beyond this many LCS cells the diff is shown as "all old lines out, all new in".
const MAX_CELLS = 4_000_000;

/** The template `commit_config` would commit. Throws (TypeError, Error) with a message
 *  naming the problem, as the server refuses the same input. */
export function applyPatch(committed, input) {
  const overlay = globalThis.ParkwayOverlay;
  const patch = input && typeof input === "object" && input.patch ? input.patch : {};
  const merged = overlay.mergeOverlay(committed, patch).template;
  const remove = new Set(input && Array.isArray(input.remove_tools) ? input.remove_tools : []);
  if (remove.size) {
    const tools = Array.isArray(merged.tools) ? merged.tools : [];
    const known = new Set(tools.map(overlay.entryIdentity));
    const unknown = [...remove].filter((identity) => !known.has(identity)).sort();
    if (unknown.length) throw new Error(`no tool with identity ${unknown.join(", ")}`);
    merged.tools = tools.filter((tool) => !remove.has(overlay.entryIdentity(tool)));
  }
  return merged;
}

/** The line diff of two texts: [{op: " " | "-" | "+", text}], old lines before new. */
export function lineDiff(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start += 1;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA -= 1;
    endB -= 1;
  }
  const same = (lines) => lines.map((text) => ({ op: " ", text }));
  const head = same(a.slice(0, start));
  const tail = same(a.slice(endA));
  const midA = a.slice(start, endA);
  const midB = b.slice(start, endB);
  const n = midA.length;
  const m = midB.length;
  if ((n + 1) * (m + 1) > MAX_CELLS) {
    const out = midA.map((text) => ({ op: "-", text }));
    return [...head, ...out, ...midB.map((text) => ({ op: "+", text })), ...tail];
  }
  // lcs[i][j]: the longest common subsequence of midA[i:] and midB[j:].
  const width = m + 1;
  const lcs = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      lcs[i * width + j] =
        midA[i] === midB[j] ? lcs[(i + 1) * width + j + 1] + 1 : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
    }
  }
  const middle = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (midA[i] === midB[j]) {
      middle.push({ op: " ", text: midA[i] });
      i += 1;
      j += 1;
    } else if (lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
      middle.push({ op: "-", text: midA[i] });
      i += 1;
    } else {
      middle.push({ op: "+", text: midB[j] });
      j += 1;
    }
  }
  while (i < n) middle.push({ op: "-", text: midA[i++] });
  while (j < m) middle.push({ op: "+", text: midB[j++] });
  return [...head, ...middle, ...tail];
}

/** The diff of two JSON values as an element: changed lines coloured, unchanged lines
 *  more than CONTEXT away from a change collapsed into one "⋯ N unchanged lines". */
export function diffView(before, after) {
  return textDiffView(pretty(before), pretty(after), {
    label: "Changes to the agent template",
    same: "No changes: the template stays as it is.",
    testid: "commit-diff",
  });
}

/** The line diff of two texts as an element, drawn as `diffView` draws it. `label`: its
 *  accessible name; `same`: what it says when nothing changed. */
export function textDiffView(before, after, { label, same, testid }) {
  const ops = lineDiff(before, after);
  const changed = ops.map((line) => line.op !== " ");
  const root = h("div", { class: "diff", "data-testid": testid, role: "group", "aria-label": label });
  if (!changed.includes(true)) {
    root.append(h("div", { class: "diff-skip", text: same }));
    return root;
  }
  const near = (index) => {
    for (let k = Math.max(0, index - CONTEXT); k <= Math.min(ops.length - 1, index + CONTEXT); k += 1) {
      if (changed[k]) return true;
    }
    return false;
  };
  let hidden = 0;
  const flush = () => {
    if (hidden) root.append(h("div", { class: "diff-skip", text: `⋯ ${hidden} unchanged line${hidden === 1 ? "" : "s"}` }));
    hidden = 0;
  };
  ops.forEach((line, index) => {
    if (!changed[index] && !near(index)) {
      hidden += 1;
      return;
    }
    flush();
    const kind = { " ": "ctx", "-": "del", "+": "add" }[line.op];
    root.append(
      h(
        "div",
        { class: `diff-line diff-${kind}`, "data-op": line.op },
        h("span", { class: "diff-sign", text: line.op }),
        h("span", { class: "diff-text", text: line.text }),
      ),
    );
  });
  flush();
  return root;
}
