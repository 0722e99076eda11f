// An independent verifier of hopchain envelope schema 2 (SPEC.md), on Node's standard library.
//
// Written from SPEC.md alone, not from the Python reader: it parses and checks every hop
// (oldest first, before any digest), checks canonical form by serialising with its own RFC 8785
// writer, recomputes every digest and signature, and refuses with the first reason code
// SPEC.md section 5 names.
//
//   node tests/vectors/verify.mjs tests/vectors/v2
//
// Prints one line per vector and "N of M vectors agree"; exits 1 on any disagreement.
//
//   node tests/vectors/verify.mjs --records < records.jsonl
//
// Reads records (see readLine) and prints one verdict a line, for tests/core's comparison.

import { createHash, createHmac, createPublicKey, verify as verifySignature } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

class Refused extends Error {
  constructor(reason, path, detail = "") {
    super(`${reason} at ${path}: ${detail}`);
    this.reason = reason;
    this.path = path;
  }
}
const refuse = (reason, path, detail) => {
  throw new Refused(reason, path, detail);
};

// -- JSON: a parser that refuses duplicate members, and an RFC 8785 writer -------------------

const MAX_DEPTH = 64; // arrays and objects nested deeper: too_deep (SPEC.md section 5)

// A number written with a fraction or an exponent (`1.0` included): never an integer. Its
// spelling is kept: a legacy chain's canonical form is step 4's, not the identity's.
class Fraction {
  constructor(text) {
    this.text = text;
    this.value = Number(text);
  }
}
// An integer beyond +-(2**53 - 1), kept exact (a JavaScript number would round it).
class Big {
  constructor(text) {
    this.value = BigInt(text);
  }
}
const isNumber = (value) => value instanceof Fraction || value instanceof Big;

function parseJson(text, path) {
  let at = 0;
  const fail = (what) => refuse("bad_json", path, `${what} at character ${at}`);
  const space = () => {
    while (at < text.length && " \t\n\r".includes(text[at])) at += 1;
  };
  const value = (depth) => {
    space();
    const c = text[at];
    if ((c === "{" || c === "[") && depth >= MAX_DEPTH) refuse("too_deep", path, "nested too deeply");
    if (c === "{") {
      at += 1;
      const object = {};
      space();
      if (text[at] === "}") return (at += 1), object;
      for (;;) {
        space();
        if (text[at] !== '"') fail("expected a member name");
        const key = string();
        if (Object.hasOwn(object, key)) refuse("bad_json", path, `duplicate key ${key}`);
        space();
        if (text[at] !== ":") fail("expected ':'");
        at += 1;
        object[key] = value(depth + 1);
        space();
        if (text[at] === ",") at += 1;
        else if (text[at] === "}") return (at += 1), object;
        else fail("expected ',' or '}'");
      }
    }
    if (c === "[") {
      at += 1;
      const array = [];
      space();
      if (text[at] === "]") return (at += 1), array;
      for (;;) {
        array.push(value(depth + 1));
        space();
        if (text[at] === ",") at += 1;
        else if (text[at] === "]") return (at += 1), array;
        else fail("expected ',' or ']'");
      }
    }
    if (c === '"') return string();
    for (const [word, result] of [["true", true], ["false", false], ["null", null]]) {
      if (text.startsWith(word, at)) return (at += word.length), result;
    }
    const number = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(at, at + 400));
    if (!number) fail("unexpected character");
    at += number[0].length;
    if (number[2] !== undefined || number[3] !== undefined) return new Fraction(number[0]);
    return Number.isSafeInteger(Number(number[0])) ? Number(number[0]) : new Big(number[0]);
  };
  const string = () => {
    at += 1;
    let out = "";
    for (;;) {
      if (at >= text.length) fail("unterminated string");
      const c = text[at];
      if (c === '"') return (at += 1), out;
      if (c < " ") fail("raw control character in a string");
      if (c === "\\") {
        const e = text[at + 1];
        const simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
        if (e in simple) (out += simple[e]), (at += 2);
        else if (e === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(at + 2, at + 6))) {
          const unit = parseInt(text.slice(at + 2, at + 6), 16);
          at += 6;
          if (unit >= 0xdc00 && unit <= 0xdfff) fail("a lone surrogate (no UTF-8 form)");
          if (unit >= 0xd800 && unit <= 0xdbff) {
            // A surrogate pair is one character; half of one is no text at all.
            const low = /^\\u([dD][c-fC-F][0-9a-fA-F]{2})/.exec(text.slice(at, at + 6));
            if (!low) fail("a lone surrogate (no UTF-8 form)");
            out += String.fromCharCode(unit, parseInt(low[1], 16));
            at += 6;
          } else out += String.fromCharCode(unit);
        } else fail("bad escape");
      } else (out += c), (at += 1);
    }
  };
  const result = value(0);
  space();
  if (at !== text.length) fail("text after the value");
  return result;
}

function jcsString(s) {
  let out = '"';
  for (const c of s) {
    const code = c.codePointAt(0);
    if (c === '"') out += '\\"';
    else if (c === "\\") out += "\\\\";
    else if (c === "\b") out += "\\b";
    else if (c === "\t") out += "\\t";
    else if (c === "\n") out += "\\n";
    else if (c === "\f") out += "\\f";
    else if (c === "\r") out += "\\r";
    else if (code < 0x20) out += "\\u" + code.toString(16).padStart(4, "0");
    else out += c;
  }
  return out + '"';
}

function jcs(value) {
  if (value === null || typeof value === "boolean") return String(value);
  if (typeof value === "number") return String(value);
  if (value instanceof Fraction) return value.text;
  if (value instanceof Big) return value.value.toString();
  if (typeof value === "string") return jcsString(value);
  if (Array.isArray(value)) return "[" + value.map(jcs).join(",") + "]";
  const keys = Object.keys(value).sort(); // UTF-16 code unit order, as RFC 8785 says
  return "{" + keys.map((k) => jcsString(k) + ":" + jcs(value[k])).join(",") + "}";
}

// -- the schema of SPEC.md section 3 ----------------------------------------------------------

const END = "$";
const str = (rules = {}) => ({ kind: "string", ...rules });
const int = (min, max = 2 ** 53 - 1) => ({ kind: "int", min, max });
const nullable = (inner) => ({ kind: "nullable", inner });
const list = (item, minItems = 0) => ({ kind: "list", item, minItems });
const words = (values) => ({ kind: "enum", values });
const object = (members) => ({ kind: "object", members });
const NAME = str({ min: 1, max: 200, pattern: new RegExp("^[^\\x00-\\x1f\\x7f]+" + END) });
const TEXT = (max) => str({ max });
const TIMESTAMP = str({
  pattern:
    /^[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.(?!0{6})[0-9]{6})?Z$/,
  timestamp: true,
});
const SPAN = str({ pattern: /^(?!0{16})[0-9a-f]{16}$/ });
const TOPIC = str({ pattern: /^[A-Za-z0-9._-]{1,249}$/ });
const ERROR_TYPES = words(["malformed", "contract_violation", "transient", "conflict",
  "rejected_input", "unauthorized", "environment", "internal"]);
const DECISIONS = words(["originated", "forwarded", "recovered", "degraded", "rerouted",
  "rejected", "dead_lettered", "aborted", "redriven", "discarded"]);
// A validation error's code is one of SPEC.md section 5's reason codes.
const REASON_CODES = words(["tombstone", "empty_value", "not_utf8", "duplicate_header",
  "missing_header", "bad_json", "too_deep", "missing_field", "wrong_type", "invalid_value",
  "unknown_field", "unknown_error_type", "unknown_decision", "unknown_vocabulary",
  "newer_major_version", "payload_invalid", "contract_mismatch", "bad_traceparent",
  "bad_digest", "bad_signature", "unsigned_hop", "chain_rewritten", "hop_limit",
  "description_too_long", "oversize", "not_canonical", "truncated_chain", "payload_mismatch",
  "unexpected_writer", "contract_error", "reader_error", "wrong_magic_byte", "unknown_schema",
  "unresolvable_schema", "undecodable_payload"]);
const ATTEMPT = object({
  description: nullable(TEXT(1000)), duration_ms: int(0), error_type: nullable(ERROR_TYPES),
  kind: words(["first", "transport", "contract"]), number: int(1),
  outcome: words(["succeeded", "failed"]), started_at: TIMESTAMP,
});
const EFFECT = object({
  identifier: NAME, kind: words(["record_written", "message_published", "call_accepted"]),
  target: NAME,
});
const FAILURE = object({
  attempts: list(ATTEMPT), component: NAME, description: TEXT(2000), effects: list(EFFECT),
  error_type: ERROR_TYPES, locally_resolvable: { kind: "bool" },
  recovery_hint: nullable(TEXT(500)), run_id: nullable(NAME),
  validation_errors: list(object({ code: REASON_CODES, message: TEXT(1000), path: TEXT(300) })),
  work_item_id: nullable(NAME),
});
const HOP = object({
  component: str({ pattern: /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/ }),
  contract: NAME, contract_version: int(1), decided_at: TIMESTAMP, decision: DECISIONS,
  degradation: nullable(object({ error_type: ERROR_TYPES, reason: TEXT(1000), stage: NAME })),
  destination: TOPIC, effects: list(EFFECT), failure: nullable(FAILURE), instance: NAME,
  observation: TEXT(1000), payload_digest: nullable(str({ pattern: /^[0-9a-f]{64}$/ })),
  received_at: nullable(TIMESTAMP),
  received_from: nullable(object({ offset: int(0), partition: int(0), topic: TOPIC })),
  span_id: SPAN, tries: list(ATTEMPT),
});
const IDENTITY = object({
  contract: NAME, contract_version: int(1), id: str({ pattern: /^[0-9A-HJKMNP-TV-Z]{26}$/ }),
  intent_key: NAME, legacy: { kind: "any" }, origin_span_id: SPAN, run_id: NAME,
  schema_version: str({ pattern: /^2\.(?:0|[1-9][0-9]{0,3})$/ }),
  trace_id: str({ pattern: /^(?!0{32})[0-9a-f]{32}$/ }), work_item_id: NAME,
});
const VOCABULARY = { decision: "unknown_decision", error_type: "unknown_error_type" };

function check(spec, value, path, name) {
  const wrong = () => refuse("wrong_type", path, `${name} has the wrong JSON type`);
  switch (spec.kind) {
    case "any":
      return;
    case "nullable":
      if (value !== null) check(spec.inner, value, path, name);
      return;
    case "bool":
      if (typeof value !== "boolean") wrong();
      return;
    case "int":
      if (value instanceof Big) refuse("invalid_value", path, "out of range");
      if (typeof value !== "number" || !Number.isInteger(value)) wrong();
      if (value < spec.min || value > spec.max) refuse("invalid_value", path, "out of range");
      return;
    case "enum":
      if (typeof value !== "string") wrong();
      if (!spec.values.includes(value)) refuse(VOCABULARY[name] ?? "unknown_vocabulary", path, value);
      return;
    case "string": {
      if (typeof value !== "string") wrong();
      const length = [...value].length;
      if ((spec.min !== undefined && length < spec.min) || (spec.max !== undefined && length > spec.max)) {
        refuse(name === "description" ? "description_too_long" : "invalid_value", path, "length");
      }
      if (spec.pattern && !spec.pattern.test(value)) refuse("invalid_value", path, "pattern");
      return;
    }
    case "list":
      if (!Array.isArray(value)) wrong();
      value.forEach((item, index) => check(spec.item, item, `${path}[${index}]`, name));
      return;
    case "object": {
      if (value === null || typeof value !== "object" || Array.isArray(value) || isNumber(value)) {
        wrong();
      }
      for (const key of Object.keys(value)) {
        if (!Object.hasOwn(spec.members, key)) refuse("unknown_field", path, key);
        check(spec.members[key], value[key], `${path}.${key}`, key);
      }
      for (const key of Object.keys(spec.members)) {
        if (!Object.hasOwn(value, key)) refuse("missing_field", path, key);
      }
      return;
    }
    default:
      throw new Error(`no rule ${spec.kind}`);
  }
}

function timestampsOf(hop, path) {
  const out = [[`${path}.decided_at`, hop.decided_at]];
  if (hop.received_at !== null) out.push([`${path}.received_at`, hop.received_at]);
  hop.tries.forEach((a, i) => out.push([`${path}.tries[${i}].started_at`, a.started_at]));
  if (hop.failure) {
    hop.failure.attempts.forEach((a, i) =>
      out.push([`${path}.failure.attempts[${i}].started_at`, a.started_at]));
  }
  return out;
}

function checkCalendar(hop, path) {
  for (const [where, text] of timestampsOf(hop, path)) {
    const [y, m, d] = text.slice(0, 10).split("-").map(Number);
    const date = new Date(0);
    date.setUTCFullYear(y, m - 1, d); // Date.UTC reads years 0 to 99 as 1900 to 1999
    if (y < 1 || date.getUTCFullYear() !== y || date.getUTCMonth() !== m - 1 || date.getUTCDate() !== d) {
      refuse("invalid_value", where, `${text} is not a date`);
    }
  }
}

// One canonical object: parsed without duplicates, checked, and equal to its RFC 8785 form.
function readObject(bytes, spec, path) {
  const text = bytes.toString("utf8");
  const value = parseJson(text, path);
  check(spec, value, path, "");
  if (jcs(value) !== text) {
    refuse("not_canonical", path, "not in RFC 8785 form");
  }
  return value;
}

// -- SPEC.md section 5 ------------------------------------------------------------------------

const sha256 = (...parts) => {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest("hex");
};
const CHAIN_START = Buffer.from(',"chain":[\n');
const CHAIN_END = Buffer.from('\n],"digests":');
const SIGNATURES = Buffer.from(',"signatures":');
const PAYLOAD = Buffer.from(',"payload":');

const ENVELOPE_HEADER = "hopchain-envelope";
const DEGRADED_HEADER = "hopchain-degraded";
const SINGLE_HEADERS = [ENVELOPE_HEADER, DEGRADED_HEADER]; // traceparent may repeat
const utf8 = new TextDecoder("utf-8", { fatal: true });
const textOf = (bytes) => {
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
};

// Whether a text uses NaN or Infinity as a value: looked for only in what parses up to them
// (a lenient parse, without the reader's other rules).
function usesNonFinite(bytes) {
  const text = bytes.toString("utf8");
  if (!/[NI]/.test(text)) return false;
  let at = 0;
  const space = () => {
    while (at < text.length && " \t\n\r".includes(text[at])) at += 1;
  };
  const stop = new Error("not JSON");
  const found = new Error("non-finite");
  const string = () => {
    at += 1;
    for (;;) {
      if (at >= text.length) throw stop;
      if (text[at] === '"') return void (at += 1);
      at += text[at] === "\\" ? 2 : 1;
    }
  };
  const value = () => {
    space();
    const c = text[at];
    if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      at += 1;
      space();
      if (text[at] === close) return void (at += 1);
      for (;;) {
        if (c === "{") {
          space();
          if (text[at] !== '"') throw stop;
          string();
          space();
          if (text[at] !== ":") throw stop;
          at += 1;
        }
        value();
        space();
        if (text[at] === ",") at += 1;
        else if (text[at] === close) return void (at += 1);
        else throw stop;
      }
    }
    if (c === '"') return string();
    if (text.startsWith("NaN", at) || text.startsWith("Infinity", at) ||
        text.startsWith("-Infinity", at)) throw found;
    for (const word of ["true", "false", "null"]) {
      if (text.startsWith(word, at)) return void (at += word.length);
    }
    const number = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(at, at + 400));
    if (!number) throw stop;
    at += number[0].length;
  };
  try {
    value();
    return false;
  } catch (error) {
    return error === found;
  }
}

// The schema a text without schema 2's layout names, found as the reference reader finds it:
// the first "schema_version" member whose value is "<1-4 digits>.<1-4 digits>".
function namedVersion(bytes) {
  const text = bytes.toString("latin1");
  const pattern = /"schema_version"[ \t\n\r\v\f]*:[ \t\n\r\v\f]*"([0-9]{1,4})\.([0-9]{1,4})"/g;
  const found = pattern.exec(text);
  return found ? [Number(found[1]), Number(found[2])] : null;
}

// A text without the layout: refused if it names a schema other than 1, else schema 1's.
function notV2(bytes) {
  const version = namedVersion(bytes);
  if (version?.[0] === 2) refuse("not_canonical", "$", "schema 2 without its layout");
  if (version && version[0] > 2) refuse("newer_major_version", "$.schema_version");
  if (version?.[0] === 0) refuse("invalid_value", "$.schema_version");
  return { kind: "schema1" };
}

// Step 1: the headers, as a record carries them ({ name, value } of bytes, value null or not).
function readHeaders(list) {
  const read = { envelope: null, degraded: null, traceparents: [], size: 0 };
  for (const { name, value } of list) {
    const lossy = name.toString("utf8");
    if (SINGLE_HEADERS.includes(lossy) && SINGLE_HEADERS.some((n) => Buffer.from(n).equals(name))) {
      const seen = lossy === ENVELOPE_HEADER ? read.envelope !== null : read.degraded !== null;
      if (seen) refuse("duplicate_header", `$.headers.${lossy}`);
    }
    const raw = value ?? Buffer.alloc(0);
    const text = textOf(raw);
    if (text === null) refuse("not_utf8", `$.headers.${lossy}`);
    const nameText = textOf(name);
    if (nameText === null) refuse("not_utf8", "$.headers");
    read.size += raw.length + name.length;
    if (nameText === ENVELOPE_HEADER) read.envelope = raw;
    else if (nameText === DEGRADED_HEADER) read.degraded = text;
    else if (nameText === "traceparent" && value !== null) read.traceparents.push(text);
  }
  return read;
}

// White space as the reference reader strips it around a traceparent (Unicode white space,
// U+001C..U+001F included); a version 00 value has exactly four fields.
const SPACE = String.raw`[\t\n\v\f\r \u001c-\u001f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]`;
const TRACE_SPACE = new RegExp(`^${SPACE}+|${SPACE}+$`, "g");

function namesTheSpan(value, traceId, spanId) {
  const found = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\n]*)?$/.exec(
    value.replace(TRACE_SPACE, ""),
  );
  if (!found || found[1] === "ff" || (found[1] === "00" && found[5] !== undefined)) return false;
  return found[2] === traceId && found[3] === spanId;
}

// SPEC.md section 5 on one record. Returns { kind: "schema1" } for what this verifier
// leaves to schema 1's reader, else { payload: [start, end], after } where after()
// applies steps 11 to 14; step 10 is the caller's.
function readRecord(record) {
  const { value, topic, mode, limits } = record;
  if (value === null) refuse("tombstone", "$");
  if (value.length === 0) refuse("empty_value", "$");
  const headers = readHeaders(record.headers);
  if (headers.size + value.length > limits.max_record_bytes) refuse("oversize", "$");
  if (textOf(value) === null) refuse("not_utf8", "$");
  const body = mode === "body";
  let raw = value;
  if (body && raw.indexOf(CHAIN_START) < 0) {
    if (usesNonFinite(raw)) refuse("bad_json", "$");
    return notV2(raw);
  }
  if (!body) {
    if (usesNonFinite(value)) refuse("bad_json", "$.payload");
    if (headers.envelope === null) refuse("missing_header", `$.headers.${ENVELOPE_HEADER}`);
    raw = headers.envelope;
    if (raw.indexOf(CHAIN_START) < 0) {
      if (usesNonFinite(raw)) refuse("bad_json", `$.headers.${ENVELOPE_HEADER}`);
      return notV2(raw);
    }
  }
  const start = raw.indexOf(CHAIN_START);
  const end = start > 0 ? raw.indexOf(CHAIN_END, start + CHAIN_START.length - 1) : -1;
  const middle = end > 0 ? raw.indexOf("]", end + CHAIN_END.length) : -1;
  const close = middle > 0 ? raw.indexOf("]", middle + 1) : -1;
  if (close < 0 || !raw.subarray(middle + 1, middle + 1 + SIGNATURES.length).equals(SIGNATURES)) {
    refuse("not_canonical", "$", "layout");
  }
  const identityBytes = Buffer.concat([raw.subarray(0, start), Buffer.from("}")]);
  const identity = readObject(identityBytes, IDENTITY, "$");
  // A schema-1 chain continued (SPEC.md section 6): this verifier checks its shape and its
  // integers, leaves the rest of step 4 to schema 1's rules, and counts its hops and markers.
  let legacyHops = [];
  if (identity.legacy !== null) {
    const legacy = identity.legacy;
    const texts = ["contract", "head", "id", "intent_key", "origin_span_id", "run_id", "trace_id",
      "work_item_id"];
    if (legacy === null || typeof legacy !== "object" || Array.isArray(legacy) || isNumber(legacy) ||
        !texts.every((name) => typeof legacy[name] === "string") ||
        !(Number.isInteger(legacy.contract_version) || legacy.contract_version instanceof Big) ||
        !Array.isArray(legacy.chain ?? [])) {
      refuse("invalid_value", "$.legacy", "not a schema-1 envelope");
    }
    const integers = [];
    let spelled = false; // a number not in RFC 8785's spelling
    const walk = (v) => {
      if (v instanceof Big) integers.push(v.value);
      else if (v instanceof Fraction) spelled ||= v.text !== String(v.value);
      else if (Array.isArray(v)) v.forEach(walk);
      else if (v !== null && typeof v === "object" && !isNumber(v)) Object.values(v).forEach(walk);
    };
    walk(identity.legacy);
    const within64 = (v) => v >= -(2n ** 63n) && v <= 2n ** 64n - 1n;
    if (integers.some(within64)) refuse("invalid_value", "$.legacy", "an integer beyond 2**53 - 1");
    if (integers.length > 0 || spelled) refuse("not_canonical", "$.legacy", "a number's spelling");
    legacyHops = legacy.chain ?? [];
    record.continuesLegacy = true; // what follows is compared where step 4 is not the cause
  }
  const chainText = raw.subarray(start + CHAIN_START.length, end);
  const hops = [];
  for (let from = 0; ; ) {
    const next = chainText.indexOf(",\n", from);
    hops.push(chainText.subarray(from, next < 0 ? chainText.length : next));
    if (next < 0) break;
    from = next + 2;
  }
  if (hops.length === 1 && hops[0].length === 0) refuse("invalid_value", "$.chain", "no hop");
  const n = hops.length - 1;
  // Step 6, for every hop, oldest first, before any digest.
  const parsed = hops.map((bytes, i) => {
    const hop = readObject(bytes, HOP, `$.chain[${i}]`);
    checkCalendar(hop, `$.chain[${i}]`);
    return hop;
  });
  const last = parsed[n];
  const digestsText = raw.subarray(end + CHAIN_END.length, middle + 1).toString("utf8");
  const digests = parseJson(digestsText, "$.digests");
  if (!Array.isArray(digests) || digests.length !== hops.length ||
      !digests.every((d) => typeof d === "string" && /^[0-9a-f]{64}$/.test(d))) {
    refuse("invalid_value", "$.digests");
  }
  if (jcs(digests) !== digestsText) refuse("not_canonical", "$.digests");
  const signaturesText = raw.subarray(middle + 1 + SIGNATURES.length, close + 1).toString("utf8");
  const signatures = parseJson(signaturesText, "$.signatures");
  if (!Array.isArray(signatures) || signatures.length !== hops.length) {
    refuse("invalid_value", "$.signatures");
  }
  signatures.forEach((s, i) => {
    if (s !== null &&
        !/^(?:hmac-sha256:[0-9a-f]{64}|ed25519:[0-9a-f]{16}:[0-9a-f]{128})$/.test(s)) {
      refuse("invalid_value", `$.signatures[${i}]`, "a signature's form");
    }
  });
  if (jcs(signatures) !== signaturesText) refuse("not_canonical", "$.signatures");
  const keys = new Map(Object.entries(record.keys).map(([c, k]) => [c, Buffer.from(k, "hex")]));
  // Ed25519 public keys by component, then by key id (SHA-256 of the raw key, 16 hex digits).
  const publics = new Map(
    Object.entries(record.public_keys ?? {}).map(([component, list]) => [
      component,
      new Map(list.map((hex) => {
        const raw = Buffer.from(hex, "hex");
        const der = Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), raw]);
        return [sha256(raw).slice(0, 16), createPublicKey({ key: der, format: "der", type: "spki" })];
      })),
    ]),
  );
  const signedBy = (component, digest, signature) => {
    const ed = /^ed25519:([0-9a-f]{16}):([0-9a-f]{128})$/.exec(signature);
    if (ed) {
      const key = publics.get(component)?.get(ed[1]);
      return key !== undefined &&
        verifySignature(null, Buffer.from(digest), key, Buffer.from(ed[2], "hex"));
    }
    const key = keys.get(component);
    return key !== undefined &&
      signature === "hmac-sha256:" + createHmac("sha256", key).update(digest).digest("hex");
  };
  let previous = sha256("hopchain-v2 genesis\n", identityBytes);
  const markers = legacyHops
    .filter((hop) => hop?.degradation != null)
    .map((hop) => (typeof hop.degradation.stage === "string" ? hop.degradation.stage : ""));
  hops.forEach((bytes, i) => {
    const path = `$.chain[${i}]`;
    const digest = sha256(previous, "\n", bytes);
    if (digest !== digests[i]) refuse("bad_digest", `$.digests[${i}]`);
    const hop = parsed[i];
    if (keys.has(hop.component) || publics.has(hop.component)) {
      if (signatures[i] === null) refuse("unsigned_hop", path);
      if (!signedBy(hop.component, digest, signatures[i])) refuse("bad_signature", path);
    }
    if (hop.degradation !== null) markers.push(hop.degradation.stage);
    previous = digest;
  });
  // Step 9: what follows the signatures.
  const rest = raw.subarray(close + 1);
  let payload = [0, value.length];
  if (!body && !rest.equals(Buffer.from("}"))) refuse("not_canonical", "$.signatures");
  if (body) {
    if (!rest.subarray(0, PAYLOAD.length).equals(PAYLOAD) || rest[rest.length - 1] !== 0x7d) {
      refuse("not_canonical", "$.payload");
    }
    payload = [close + 1 + PAYLOAD.length, value.length - 1];
    if (usesNonFinite(value.subarray(...payload))) refuse("bad_json", "$.payload");
  }
  const after = () => {
    if (last.destination !== topic) refuse("truncated_chain", `$.chain[${n}].destination`);
    if (record.writers.length > 0 && !record.writers.includes(last.component)) {
      refuse("unexpected_writer", `$.chain[${n}].component`);
    }
    if (last.contract !== record.contract[0] || last.contract_version !== record.contract[1]) {
      refuse("contract_mismatch", `$.chain[${n}].contract`);
    }
    if (last.payload_digest !== sha256(value.subarray(...payload))) {
      refuse("payload_mismatch", `$.chain[${n}].payload_digest`);
    }
    if (legacyHops.length + hops.length > limits.max_hops) refuse("hop_limit", "$.chain");
    // traceparent may repeat (an instrumentation appends its own): one must name this trace
    // and the last hop's span.
    if (!headers.traceparents.some((p) => namesTheSpan(p, identity.trace_id, last.span_id))) {
      refuse("bad_traceparent", "$.headers.traceparent");
    }
    if (headers.degraded !== null && headers.degraded !== markers.join(",")) {
      refuse("invalid_value", `$.headers.${DEGRADED_HEADER}`);
    }
  };
  return { payload, after, legacy: identity.legacy !== null };
}

// A vector of tests/vectors/v2 as a record of its topic ("claims" contract, any writer).
function recordOfVector(vector) {
  return {
    topic: vector.topic,
    mode: vector.mode,
    contract: vector.contract,
    writers: [],
    value: Buffer.from(vector.value, "utf8"),
    headers: vector.headers.map(([name, value]) => ({
      name: Buffer.from(name, "utf8"),
      value: value === null ? null : Buffer.from(value, "utf8"),
    })),
    keys: vector.keys,
    public_keys: vector.public_keys,
    limits: { max_hops: 64, max_record_bytes: 1_000_000 },
  };
}

// Step 10 for the vectors' one contract: a claim of two integers, in strict JSON.
function checkClaim(bytes) {
  const claim = parseJson(bytes.toString("utf8"), "$.payload");
  const claimKeys = Object.keys(claim ?? {}).sort().join(",");
  if (claimKeys !== "amount_cents,number" || !Number.isInteger(claim.number) ||
      !Number.isInteger(claim.amount_cents)) {
    refuse("payload_invalid", "$.payload");
  }
}

function verify(vector) {
  const record = recordOfVector(vector);
  const read = readRecord(record);
  if (read.kind === "schema1") throw new Error("schema 1 records are not covered by this verifier");
  if (read.legacy) throw new Error("legacy chains are not covered by this verifier");
  checkClaim(record.value.subarray(...read.payload));
  read.after();
}

function outcome(vector) {
  try {
    verify(vector);
    return { reason: null };
  } catch (error) {
    if (error instanceof Refused) return { reason: error.reason, path: error.path };
    return { reason: "error", path: String(error.message) };
  }
}

// Records mode: one JSON object a line on stdin, bytes in base64 ({topic, mode, contract:
// [name, version], writers, value, headers: [[name, value]], keys, public_keys, max_hops,
// max_record_bytes}); one verdict a line on stdout, step 10 left to the caller as the core
// leaves it: {kind: "accepted" | "refused_after_payload", payload: [start, end]} (plus code
// and path when refused), {kind: "refused", code, path}, or {kind: "schema1"} for what it
// leaves to schema 1's reader; "legacy": true when the record continues a schema-1 chain,
// whose links (step 4 past shape and integers) this verifier does not check.
function readLine(line) {
  const input = JSON.parse(line);
  const bytes = (text) => (text === null ? null : Buffer.from(text, "base64"));
  const record = {
    ...input,
    value: bytes(input.value),
    headers: input.headers.map(([name, value]) => ({ name: bytes(name), value: bytes(value) })),
    limits: { max_hops: input.max_hops, max_record_bytes: input.max_record_bytes },
  };
  let read;
  try {
    read = readRecord(record);
  } catch (error) {
    if (error instanceof Refused) {
      const legacy = record.continuesLegacy ? { legacy: true } : {};
      return { kind: "refused", code: error.reason, path: error.path, ...legacy };
    }
    return { kind: "error", path: String(error.stack) };
  }
  if (read.kind) return read;
  const legacy = record.continuesLegacy ? { legacy: true } : {};
  try {
    read.after();
  } catch (error) {
    if (!(error instanceof Refused)) return { kind: "error", path: String(error.stack) };
    return { kind: "refused_after_payload", code: error.reason, path: error.path,
      payload: read.payload, ...legacy };
  }
  return { kind: "accepted", payload: read.payload, ...legacy };
}

// The output goes to a pipe, written asynchronously: the process ends when it is flushed
// (process.exit would cut it short), with process.exitCode as its status.
function recordsMode() {
  const lines = readFileSync(0, "utf8").split("\n").filter((line) => line.length > 0);
  process.stdout.write(lines.map((line) => JSON.stringify(readLine(line)) + "\n").join(""));
}

function vectorMode(directory) {
  const files = readdirSync(directory).filter((f) => f.endsWith(".json")).sort();
  let agree = 0;
  for (const file of files) {
    const vector = JSON.parse(readFileSync(join(directory, file), "utf8"));
    const got = outcome(vector);
    const same = JSON.stringify(got) === JSON.stringify(vector.expect);
    agree += same ? 1 : 0;
    console.log(`${same ? "ok  " : "DIFF"} ${vector.name}: ${JSON.stringify(got)}` +
      (same ? "" : ` expected ${JSON.stringify(vector.expect)}`));
  }
  console.log(`${agree} of ${files.length} vectors agree`);
  process.exitCode = agree === files.length ? 0 : 1;
}

if (process.argv[2] === "--records") recordsMode();
else vectorMode(process.argv[2]);
