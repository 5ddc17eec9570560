// Parkway canonical JSON (RFC 8785, JCS) and the parkedCallKey, for the playground.
//
// The same text runner/canonical.py makes, so a key or canonical form computed here
// agrees with the server's; tests/helpers/vectors/jcs.json holds both to the same cases.
// JSON.stringify already prints numbers (ECMAScript's shortest round-trip form: 1.0 is
// 1, -0 is 0, 1e21 is 1e+21) and strings (only '"', '\' and control characters escaped)
// the way JCS wants; what it leaves to us is sorting object keys by UTF-16 code units,
// which is what Array.prototype.sort does with no comparator. We write it ourselves
// rather than ship a library because that is the whole of it.
//
// A value with no canonical form throws a TypeError, as the server refuses it: anything
// JSON.parse cannot give (undefined, functions, bigints, Maps, class instances, array
// holes, symbol keys), numbers that are not finite (JSON.parse reads 1e400 as Infinity),
// strings with a lone surrogate, and nesting deeper than 64 levels (a cycle among them).
//
// An ES module with no imports, so Node can load it as it is
// (tests/helpers/vectors/jcs_vectors.mjs).

const MAX_DEPTH = 64;
// With the u flag a surrogate pair is one code point, so this finds only lone halves.
const LONE_SURROGATE = /\p{Surrogate}/u;

function plainString(text) {
  if (LONE_SURROGATE.test(text)) {
    throw new TypeError("a string holds a lone surrogate (text that is not Unicode)");
  }
  return JSON.stringify(text);
}

function isPlainObject(value) {
  const proto = Object.getPrototypeOf(value);
  return proto === null || Object.getPrototypeOf(proto) === null;
}

function write(value, depth) {
  if (depth > MAX_DEPTH) throw new TypeError("value nests deeper than 64 levels");
  if (value === null || typeof value === "boolean") return String(value);
  if (typeof value === "string") return plainString(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError("value contains a non-finite number");
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) {
    const items = [];
    for (let i = 0; i < value.length; i += 1) {
      if (!Object.hasOwn(value, i)) throw new TypeError("an array has a hole");
      items.push(write(value[i], depth + 1));
    }
    return `[${items.join(",")}]`;
  }
  if (typeof value === "object" && isPlainObject(value)) {
    if (Object.getOwnPropertySymbols(value).length) {
      throw new TypeError("object key is not a string");
    }
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${plainString(k)}:${write(value[k], depth + 1)}`).join(",")}}`;
  }
  const kind = value !== null && typeof value === "object" ? value.constructor?.name : typeof value;
  throw new TypeError(`value of type ${kind || "object"} is not plain JSON`);
}

/** RFC 8785 canonical JSON of a plain JSON value; throws a TypeError for anything else. */
export function canonicalJson(value) {
  return write(value, 0);
}

/** `toolName#canonicalJson(input)`, the server's parkedCallKey; absent input counts as {}. */
export function parkedCallKey(toolName, input) {
  return `${toolName}#${canonicalJson(input ?? {})}`;
}
