/*
 * Parkway build-kit overlay merge, for the playground.
 *
 * The same rules as widgets_api/playground/overlay.py (its docstring is the full statement), pinned by
 * tests/helpers/vectors/overlay_merge.json, which both implementations must pass. In short:
 * list sections (top-level tools, skills, mcps) merge by entry identity, replacing a match
 * in place or appending; every other key deep-merges objects with the overlay winning at
 * the leaf (arrays and null are leaves); key order is the template's keys, then the
 * overlay's new keys; an override {path: [segments], identity?} is recorded where the
 * overlay replaced a differing value the template already had. Inputs must be plain JSON
 * objects (else TypeError) and are never mutated; the result shares nothing with them.
 * Paths are arrays of key segments, so a key containing a dot needs no escaping.
 * JS objects list integer-like keys ("0", "42") first whatever the document's order; for
 * such keys only, key order and override order can differ from Python's (values do not).
 *
 * A plain script: <script src="static/overlay.js"> defines
 * globalThis.ParkwayOverlay = {mergeOverlay, entryIdentity}. No build step, no modules.
 */
(function (root) {
  "use strict";

  var LIST_SECTIONS = ["tools", "skills", "mcps"];
  var HINT = "use plain objects, arrays, strings, finite numbers, booleans or null";
  var hasOwn = Object.prototype.hasOwnProperty;

  function own(object, key) {
    return hasOwn.call(object, key) ? object[key] : undefined;
  }

  // Define rather than assign, so a "__proto__" key from JSON stays an ordinary key.
  function setOwn(object, key, value) {
    Object.defineProperty(object, key, {
      value: value,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }

  // Plain objects from any realm (an iframe, node's vm) count: their prototype is some
  // realm's Object.prototype, or null.
  function isPlainObject(value) {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return false;
    if (Object.prototype.toString.call(value) !== "[object Object]") return false;
    var proto = Object.getPrototypeOf(value);
    return proto === null || Object.getPrototypeOf(proto) === null;
  }

  function isName(value) {
    return typeof value === "string" && value !== "";
  }

  function kind(value) {
    if (value === null) return "null";
    if (Array.isArray(value)) return "array";
    if (isPlainObject(value)) return "object";
    if (typeof value === "object") {
      var proto = Object.getPrototypeOf(value);
      var ctor = proto && proto.constructor;
      return ctor && typeof ctor.name === "string" && ctor.name ? ctor.name : "object";
    }
    return typeof value;
  }

  function where(side, path) {
    return side + path.map(function (segment) {
      return "[" + JSON.stringify(segment) + "]";
    }).join("");
  }

  function entryIdentity(entry) {
    if (!isPlainObject(entry)) return null;
    var op = own(entry, "op");
    if (own(entry, "type") === "platform" && isName(op)) return "platform:" + op;
    var slug = entry;
    ["@ag.embed", "@ag.references", "workflow", "slug"].forEach(function (key) {
      slug = isPlainObject(slug) ? own(slug, key) : undefined;
    });
    if (isName(slug)) return "workflow:" + slug;
    var name = own(entry, "name");
    if (isName(name)) return "name:" + name;
    return null;
  }

  // Deep-copy value, refusing anything that is not plain JSON.
  function copyPlain(value, side, path, active) {
    if (value === null || typeof value === "boolean" || typeof value === "string") {
      return value;
    }
    if (typeof value === "number") {
      if (!Number.isFinite(value)) {
        throw new TypeError(where(side, path) + ": " + value + " is not a JSON number; " + HINT);
      }
      return value;
    }
    var isArray = Array.isArray(value);
    if (!isArray && !isPlainObject(value)) {
      throw new TypeError(where(side, path) + ": " + kind(value) + " is not plain JSON; " + HINT);
    }
    if (active.has(value)) {
      throw new TypeError(where(side, path) + ": the value contains itself (a cycle)");
    }
    active.add(value);
    try {
      if (isArray) {
        var items = [];
        for (var i = 0; i < value.length; i++) {
          items.push(copyPlain(value[i], side, path.concat([String(i)]), active));
        }
        return items;
      }
      if (Object.getOwnPropertySymbols(value).length > 0) {
        throw new TypeError(where(side, path) + ": symbol keys are not JSON; " + HINT);
      }
      var copied = {};
      Object.keys(value).forEach(function (key) {
        setOwn(copied, key, copyPlain(value[key], side, path.concat([key]), active));
      });
      return copied;
    } finally {
      active.delete(value);
    }
  }

  function jsonEqual(a, b) {
    if (Array.isArray(a) || Array.isArray(b)) {
      if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
      return a.every(function (item, i) { return jsonEqual(item, b[i]); });
    }
    if (isPlainObject(a) || isPlainObject(b)) {
      if (!isPlainObject(a) || !isPlainObject(b)) return false;
      var keys = Object.keys(a);
      if (keys.length !== Object.keys(b).length) return false;
      return keys.every(function (key) { return hasOwn.call(b, key) && jsonEqual(a[key], b[key]); });
    }
    return a === b;
  }

  function topLevel(value, side) {
    if (!isPlainObject(value)) {
      throw new TypeError(side + " must be a JSON object, got " + kind(value));
    }
    var copied = copyPlain(value, side, [], new Set());
    LIST_SECTIONS.forEach(function (key) {
      if (hasOwn.call(copied, key) && !Array.isArray(copied[key])) {
        throw new TypeError(
          side + "[" + JSON.stringify(key) + "] must be a JSON array (a list section merged " +
          "by identity), got " + kind(copied[key])
        );
      }
    });
    return copied;
  }

  function mergeValue(old, next, path, overrides) {
    if (isPlainObject(old) && isPlainObject(next)) {
      var merged = {};
      Object.keys(old).forEach(function (key) { setOwn(merged, key, old[key]); });
      Object.keys(next).forEach(function (key) {
        if (hasOwn.call(merged, key)) {
          setOwn(merged, key, mergeValue(merged[key], next[key], path.concat([key]), overrides));
        } else {
          setOwn(merged, key, next[key]);
        }
      });
      return merged;
    }
    if (!jsonEqual(old, next)) overrides.push({ path: path });
    return next;
  }

  function mergeSection(section, old, next, overrides) {
    var merged = old.slice();
    var identities = old.map(entryIdentity);
    var seen = new Set();
    next.forEach(function (entry) {
      var identity = entryIdentity(entry);
      if (identity === null) {
        merged.push(entry);
        return;
      }
      if (seen.has(identity)) {
        throw new TypeError(
          "overlay[" + JSON.stringify(section) + "] has two entries with identity " +
          JSON.stringify(identity) + "; keep one of them"
        );
      }
      seen.add(identity);
      var index = identities.indexOf(identity);
      if (index === -1) {
        merged.push(entry);
        return;
      }
      if (!jsonEqual(merged[index], entry)) {
        overrides.push({ path: [section], identity: identity });
      }
      merged[index] = entry;
    });
    return merged;
  }

  function mergeOverlay(template, overlay) {
    var base = topLevel(template, "template");
    var top = topLevel(overlay, "overlay");
    var overrides = [];
    var merged = {};
    Object.keys(base).forEach(function (key) { setOwn(merged, key, base[key]); });
    Object.keys(top).forEach(function (key) {
      var value = top[key];
      if (LIST_SECTIONS.indexOf(key) !== -1) {
        var old = hasOwn.call(base, key) ? base[key] : [];
        setOwn(merged, key, mergeSection(key, old, value, overrides));
      } else if (hasOwn.call(merged, key)) {
        setOwn(merged, key, mergeValue(merged[key], value, [key], overrides));
      } else {
        setOwn(merged, key, value);
      }
    });
    return { template: merged, overrides: overrides };
  }

  root.ParkwayOverlay = Object.freeze({
    mergeOverlay: mergeOverlay,
    entryIdentity: entryIdentity,
  });
})(globalThis);
