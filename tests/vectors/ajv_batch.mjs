// The exported JSON Schemas applied by ajv to many records in one process (the mutation
// campaign, tests/schemas/test_mutation_campaign.py).
//
//   node tests/vectors/ajv_batch.mjs NODE_MODULES BATCH.json
//
// BATCH.json: {"schemas": {kind: schema}, "records": [{"name", "documents": [[kind, base64
// or null], ...]}]}. Prints one JSON object, name -> "accept" | "reject" | "unparsed":
// "unparsed" when a document is absent, not UTF-8 or not JSON; "reject" when one is invalid.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, batchFile] = process.argv.slice(2);
const { default: Ajv2020 } = await import(pathToFileURL(join(modules, "ajv/dist/2020.js")).href);
const ajv = new Ajv2020({ strict: false, allErrors: false });
const batch = JSON.parse(readFileSync(batchFile, "utf8"));
const validate = Object.fromEntries(
  Object.entries(batch.schemas).map(([kind, schema]) => [kind, ajv.compile(schema)]),
);
const utf8 = new TextDecoder("utf-8", { fatal: true });

function verdictOf(documents) {
  let verdict = "accept";
  for (const [kind, encoded] of documents) {
    let document;
    try {
      document = JSON.parse(utf8.decode(Buffer.from(encoded, "base64")));
    } catch {
      return "unparsed"; // null (absent), not UTF-8, or not JSON
    }
    if (!validate[kind](document)) verdict = "reject";
  }
  return verdict;
}

const verdicts = {};
for (const record of batch.records) verdicts[record.name] = verdictOf(record.documents);
process.stdout.write(JSON.stringify(verdicts));
