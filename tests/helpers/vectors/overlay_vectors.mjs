// Runs overlay merge vectors through widgets_api/playground/static/overlay.js, the playground's copy
// of the merge rules, so the JS side is held to the same cases as widgets_api/playground/overlay.py.
//
//   node tests/helpers/vectors/overlay_vectors.mjs tests/helpers/vectors/overlay_merge.json
//
// Prints one JSON summary on stdout and exits 1 when any case or check fails. Each case is
// also checked for the merge's promises beyond its output: the inputs are left untouched,
// deep-frozen inputs merge alike, the result shares no object with the inputs, and a copy
// of the script loaded in a separate bare context (as a browser <script> would, with
// inputs from another realm) gives the same answer.

import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import vm from "node:vm";

import { runVectors } from "./vector_run.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const scriptPath = path.resolve(here, "..", "..", "..", "widgets_api", "playground", "static", "overlay.js");
const source = readFileSync(scriptPath, "utf8");

// A classic script run in this realm's global scope, exactly as <script src> runs it.
vm.runInThisContext(source, { filename: scriptPath });
const { mergeOverlay, entryIdentity } = globalThis.ParkwayOverlay;

// A second copy in a bare context: no module, no require, no DOM, another realm's Object.
const bare = vm.createContext({});
vm.runInContext(source, bare, { filename: scriptPath });
const bareOverlay = vm.runInContext("globalThis.ParkwayOverlay", bare);

const clone = (value) => JSON.parse(JSON.stringify(value));
const text = (value) => JSON.stringify(value);

function deepFreeze(value) {
  if (value !== null && typeof value === "object") {
    Object.values(value).forEach(deepFreeze);
    Object.freeze(value);
  }
  return value;
}

function containers(value, into = new Set()) {
  if (value !== null && typeof value === "object") {
    into.add(value);
    Object.values(value).forEach((item) => containers(item, into));
  }
  return into;
}

function sharesWith(result, inputs) {
  const seen = new Set();
  inputs.forEach((input) => containers(input, seen));
  return [...containers(result)].some((item) => seen.has(item));
}

function checkCase(entry) {
  if (entry.error) {
    try {
      mergeOverlay(clone(entry.template), clone(entry.overlay));
    } catch (error) {
      if (error instanceof TypeError) return null;
      return `threw ${error && error.name} instead of TypeError: ${error && error.message}`;
    }
    return "returned instead of throwing TypeError";
  }
  const template = clone(entry.template);
  const overlay = clone(entry.overlay);
  const before = text([template, overlay]);
  let result;
  try {
    result = mergeOverlay(template, overlay);
  } catch (error) {
    return `threw ${error && error.name}: ${error && error.message}`;
  }
  const want = { template: entry.expected.template, overrides: entry.expected.overrides };
  const got = text({ template: result.template, overrides: result.overrides });
  if (text(Object.keys(result)) !== text(["template", "overrides"])) {
    return `result keys are ${text(Object.keys(result))}`;
  }
  if (got !== text(want)) return `got ${got}, want ${text(want)}`;
  if (text([template, overlay]) !== before) return "mutated its inputs";
  if (sharesWith(result, [template, overlay])) return "result shares objects with its inputs";
  try {
    const frozen = mergeOverlay(deepFreeze(clone(entry.template)), deepFreeze(clone(entry.overlay)));
    if (text(frozen) !== text(result)) return "frozen inputs merged differently";
  } catch (error) {
    return `frozen inputs threw ${error && error.name}: ${error && error.message}`;
  }
  const other = bareOverlay.mergeOverlay(clone(entry.template), clone(entry.overlay));
  if (text(other) !== text(result)) return "the bare-context copy merged differently";
  return null;
}

class NotPlain {
  constructor() {
    this.name = "x";
  }
}

function throwsTypeError(fn) {
  try {
    fn();
  } catch (error) {
    return error instanceof TypeError;
  }
  return false;
}

const cycle = { name: "loop" };
cycle.self = cycle;

// Values no JSON document can hold, so they cannot be vectors; each must be refused.
const notJson = {
  undefined: { x: undefined },
  function: { x() {} },
  NaN: { x: Number.NaN },
  Infinity: { x: Number.POSITIVE_INFINITY },
  bigint: { x: 1n },
  Map: { x: new Map() },
  Date: { x: new Date(0) },
  "class instance": { x: new NotPlain() },
  "symbol key": { [Symbol("k")]: 1 },
  "array hole": { x: [1, , 3] },
  cycle: { x: cycle },
};

const checks = {
  "loads as a classic script in a bare context": () =>
    typeof bareOverlay.mergeOverlay === "function" &&
    typeof bareOverlay.entryIdentity === "function" &&
    vm.runInContext("typeof module === 'undefined' && typeof require === 'undefined'", bare),
  "entryIdentity of a non-object is null": () =>
    [null, "name:a", 3, [{ name: "a" }], {}].every((value) => entryIdentity(value) === null),
  "entryIdentity accepts a null-prototype object": () =>
    entryIdentity(Object.assign(Object.create(null), { name: "a" })) === "name:a",
  "a top-level non-object is refused": () =>
    [undefined, null, [], "x", 1, new Map(), new NotPlain()].every(
      (value) => throwsTypeError(() => mergeOverlay(value, {})) &&
        throwsTypeError(() => mergeOverlay({}, value)),
    ),
  "Object.prototype is untouched": () => ({}).polluted === undefined,
};
for (const [label, value] of Object.entries(notJson)) {
  checks[`${label} in the template is refused`] = () =>
    throwsTypeError(() => mergeOverlay({ sandbox: value }, {}));
  checks[`${label} in the overlay is refused`] = () =>
    throwsTypeError(() => mergeOverlay({}, { tools: [value] }));
}

runVectors(process.argv[2] ?? path.resolve(here, "overlay_merge.json"), checkCase, checks);
