// Writes the reference token ids of the committed corpus, for the exactness test in tests/unit/tokenize.
// The corpus (tests/unit/tokenize/data/corpus.jsonl: one {"name", "text"} per line) is encoded with the npm
// tiktoken package's own cl100k_base encoder, encode_ordinary (special tokens are plain text, as in prefixgate).
//
// Usage: node encode_corpus.mjs [corpus.jsonl] [output.json]
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { get_encoding } from "tiktoken";

const here = path.dirname(fileURLToPath(import.meta.url));
const dataDir = path.join(here, "../../tests/unit/tokenize/data");
const corpusPath = process.argv[2] ?? path.join(dataDir, "corpus.jsonl");
const outPath = process.argv[3] ?? path.join(dataDir, "corpus.cl100k.json");

const version = JSON.parse(readFileSync(path.join(here, "node_modules/tiktoken/package.json"), "utf8")).version;
const enc = get_encoding("cl100k_base");
const texts = readFileSync(corpusPath, "utf8")
  .split("\n")
  .filter((line) => line.length > 0)
  .map((line) => JSON.parse(line));

const expected = texts.map(({ name, text }) => ({ name, ids: Array.from(enc.encode_ordinary(text)) }));
// One text per line keeps diffs of the committed file readable when the corpus grows.
const body = expected.map((e) => "    " + JSON.stringify(e)).join(",\n");
writeFileSync(outPath,
  `{\n  "encoding": "cl100k_base",\n  "generator": "npm tiktoken ${version} encode_ordinary",\n  "texts": [\n${body}\n  ]\n}\n`);
const tokens = expected.reduce((n, e) => n + e.ids.length, 0);
console.log(`wrote ${expected.length} texts, ${tokens} tokens to ${outPath}`);
enc.free();
