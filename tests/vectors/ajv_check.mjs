// The exported JSON Schemas, applied by ajv (a second JSON Schema implementation) to every
// vector's envelope document: each must be accepted or refused as the vector says.
//
//   node tests/vectors/ajv_check.mjs NODE_MODULES HEADERS_SCHEMA BODY_SCHEMA VECTORS_DIR
//
// ajv is installed from npm into a local folder by .ci/run (never vendored).

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, headersSchema, bodySchema, directory] = process.argv.slice(2);
const { default: Ajv2020 } = await import(pathToFileURL(join(modules, "ajv/dist/2020.js")).href);
const ajv = new Ajv2020({ strict: false, allErrors: false });
const validate = {
  headers: ajv.compile(JSON.parse(readFileSync(headersSchema, "utf8"))),
  body: ajv.compile(JSON.parse(readFileSync(bodySchema, "utf8"))),
};

const files = readdirSync(directory).filter((f) => f.endsWith(".json")).sort();
let agree = 0;
for (const file of files) {
  const vector = JSON.parse(readFileSync(join(directory, file), "utf8"));
  const headers = new Map(vector.headers);
  const text = vector.mode === "body" ? vector.value : headers.get("hopchain-envelope");
  let verdict;
  try {
    const document = JSON.parse(text);
    verdict = validate[vector.mode](document) ? "accept" : "reject";
  } catch {
    verdict = "unparsed";
  }
  const same = verdict === vector.schema;
  agree += same ? 1 : 0;
  const why = same ? "" : ` expected ${vector.schema} ${JSON.stringify(validate[vector.mode].errors)}`;
  console.log(`${same ? "ok  " : "DIFF"} ${vector.name}: ${verdict}${why}`);
}
console.log(`${agree} of ${files.length} vectors agree with ajv`);
process.exit(agree === files.length ? 0 : 1);
