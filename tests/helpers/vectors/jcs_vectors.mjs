// Runs canonical JSON vectors through widgets_api/playground/static/canonical.js, the playground's
// RFC 8785 canonicalisation, so the browser is held to the same cases as
// runner/canonical.py and a parkedCallKey made on either side agrees.
//
//   node tests/helpers/vectors/jcs_vectors.mjs tests/helpers/vectors/jcs.json
//
// Prints one JSON summary on stdout and exits 1 when any case or check fails. The module
// is imported as the browser loads it: an ES module file, untouched.

import path from "node:path";
import { fileURLToPath } from "node:url";

import { canonicalJson, parkedCallKey } from "../../../widgets_api/playground/static/canonical.js";
import { runVectors } from "./vector_run.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));

function checkCase(entry) {
  const value = JSON.parse(entry.input);
  if (entry.error) {
    try {
      const got = canonicalJson(value);
      return `returned ${JSON.stringify(got)} instead of throwing TypeError`;
    } catch (error) {
      if (error instanceof TypeError) return null;
      return `threw ${error && error.name} instead of TypeError: ${error && error.message}`;
    }
  }
  let got;
  try {
    got = canonicalJson(value);
  } catch (error) {
    return `threw ${error && error.name}: ${error && error.message}`;
  }
  if (got !== entry.canonical) {
    return `got ${JSON.stringify(got)}, want ${JSON.stringify(entry.canonical)}`;
  }
  const key = value === null ? "tool#{}" : `tool#${entry.canonical}`; // absent input is {}
  if (parkedCallKey("tool", value) !== key) return "parkedCallKey differs";
  return null;
}

function throwsTypeError(fn) {
  try {
    fn();
  } catch (error) {
    return error instanceof TypeError;
  }
  return false;
}

class NotPlain {
  constructor() {
    this.x = 1;
  }
}

const cycle = { name: "loop" };
cycle.self = cycle;

// Values no JSON document can hold, so they cannot be vectors; each must be refused.
const notJson = {
  undefined: { x: undefined },
  "top-level undefined": undefined,
  function: { x() {} },
  NaN: [Number.NaN],
  Infinity: { x: Number.POSITIVE_INFINITY },
  bigint: { x: 1n },
  Map: { x: new Map() },
  Date: { x: new Date(0) },
  "class instance": new NotPlain(),
  "symbol key": { [Symbol("k")]: 1 },
  "array hole": [1, , 3],
  cycle,
};

const checks = {
  "absent input keys as {}": () =>
    parkedCallKey("t", undefined) === "t#{}" && parkedCallKey("t", null) === "t#{}",
  "a parkedCallKey is the tool, '#', and the canonical input": () =>
    parkedCallKey("pick", { x: 1.0, b: "\u2028" }) === 'pick#{"b":"\u2028","x":1}',
  "a null-prototype object is plain": () =>
    canonicalJson(Object.assign(Object.create(null), { b: 1, a: 2 })) === '{"a":2,"b":1}',
  "keys made by the program sort alike": () =>
    canonicalJson({ "\ufb33": 1, "\u{1f600}": 2 }) === '{"\u{1f600}":2,"\ufb33":1}',
};
for (const [label, value] of Object.entries(notJson)) {
  checks[`${label} is refused`] = () => throwsTypeError(() => canonicalJson(value));
}

runVectors(process.argv[2] ?? path.resolve(here, "jcs.json"), checkCase, checks);
