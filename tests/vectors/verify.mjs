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
    return Number(number[0]);
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
  validation_errors: list(object({ code: str(), message: TEXT(1000), path: TEXT(300) })),
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
      if (value === null || typeof value !== "object" || Array.isArray(value)) wrong();
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
    const date = new Date(Date.UTC(y, m - 1, d));
    if (date.getUTCFullYear() !== y || date.getUTCMonth() !== m - 1 || date.getUTCDate() !== d) {
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

function verify(vector) {
  const headers = new Map(vector.headers);
  const body = vector.mode === "body";
  const raw = Buffer.from(body ? vector.value : headers.get("hopchain-envelope") ?? "", "utf8");
  if (!body && !headers.has("hopchain-envelope")) refuse("missing_header", "$.headers.hopchain-envelope");
  const start = raw.indexOf(CHAIN_START);
  if (start < 0) {
    const doc = parseJson(raw.toString("utf8"), "$");
    if (String(doc?.schema_version ?? "").startsWith("2.")) refuse("not_canonical", "$", "layout");
    throw new Error("schema 1 records are not covered by this verifier");
  }
  const end = raw.indexOf(CHAIN_END, start);
  const middle = end > 0 ? raw.indexOf("]", end + CHAIN_END.length) : -1;
  const close = middle > 0 ? raw.indexOf("]", middle + 1) : -1;
  if (close < 0 || !raw.subarray(middle + 1, middle + 1 + SIGNATURES.length).equals(SIGNATURES)) {
    refuse("not_canonical", "$", "layout");
  }
  const identityBytes = Buffer.concat([raw.subarray(0, start), Buffer.from("}")]);
  const identity = readObject(identityBytes, IDENTITY, "$");
  if (identity.legacy !== null) {
    // A schema-1 envelope (SPEC.md section 6); this verifier checks no more than that.
    const legacy = identity.legacy;
    if (typeof legacy !== "object" || Array.isArray(legacy) ||
        !/^1\.[0-9]{1,4}$/.test(String(legacy.schema_version ?? "")) ||
        !Array.isArray(legacy.chain) || typeof legacy.head !== "string") {
      refuse("invalid_value", "$.legacy", "not a schema-1 envelope");
    }
    throw new Error("legacy chains are not covered by this verifier");
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
  if (!Array.isArray(signatures) || signatures.length !== hops.length ||
      !signatures.every((s) => s === null ||
        /^(?:hmac-sha256:[0-9a-f]{64}|ed25519:[0-9a-f]{16}:[0-9a-f]{128})$/.test(s))) {
    refuse("invalid_value", "$.signatures");
  }
  if (jcs(signatures) !== signaturesText) refuse("not_canonical", "$.signatures");
  const keys = new Map(Object.entries(vector.keys).map(([c, k]) => [c, Buffer.from(k, "hex")]));
  // Ed25519 public keys by component, then by key id (SHA-256 of the raw key, 16 hex digits).
  const publics = new Map(
    Object.entries(vector.public_keys ?? {}).map(([component, list]) => [
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
  const markers = [];
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
  const rest = raw.subarray(close + 1);
  let payload = Buffer.from(vector.value, "utf8");
  if (!body && !rest.equals(Buffer.from("}"))) refuse("not_canonical", "$.signatures");
  if (body) {
    if (!rest.subarray(0, PAYLOAD.length).equals(PAYLOAD) || rest[rest.length - 1] !== 0x7d) {
      refuse("not_canonical", "$.payload");
    }
    payload = rest.subarray(PAYLOAD.length, rest.length - 1);
  }
  const claim = parseJson(payload.toString("utf8"), "$.payload");
  const claimKeys = Object.keys(claim ?? {}).sort().join(",");
  if (claimKeys !== "amount_cents,number" || !Number.isInteger(claim.number) ||
      !Number.isInteger(claim.amount_cents)) {
    refuse("payload_invalid", "$.payload");
  }
  if (last.destination !== vector.topic) refuse("truncated_chain", `$.chain[${n}].destination`);
  if (last.contract !== vector.contract[0] || last.contract_version !== vector.contract[1]) {
    refuse("contract_mismatch", `$.chain[${n}].contract`);
  }
  if (last.payload_digest !== sha256(payload)) refuse("payload_mismatch", `$.chain[${n}].payload_digest`);
  if (hops.length > 64) refuse("hop_limit", "$.chain");
  // traceparent may repeat (an instrumentation appends its own): one must name this trace
  // and the last hop's span.
  const parents = vector.headers
    .filter(([name]) => name === "traceparent")
    .map(([, value]) => /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(value ?? ""));
  if (!parents.some((p) => p && p[1] === identity.trace_id && p[2] === last.span_id)) {
    refuse("bad_traceparent", "$.headers.traceparent");
  }
  const degraded = headers.get("hopchain-degraded");
  if (degraded !== undefined && degraded !== markers.join(",")) {
    refuse("invalid_value", "$.headers.hopchain-degraded");
  }
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

const directory = process.argv[2];
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
process.exit(agree === files.length ? 0 : 1);
