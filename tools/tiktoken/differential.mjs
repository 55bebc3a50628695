// Randomized differential test of prefixgate's cl100k_base tokenizer against the npm tiktoken encoder.
// Generates seeded random texts (words of many scripts, contractions in any case, runs of every kind of white
// space, digits, punctuation, emoji, arbitrary code points), encodes them with the npm encoder, and runs the C++
// test TiktokenExactness.DifferentialFile over the result, which reports the number of differing tokens.
//
// Usage: node differential.mjs [--bytes N] [--seed S] [--sweep] [--binary path/to/unit_tokenize] [--out file]
//   --sweep  also puts every code point (U+0080..U+10FFFF) in several contexts, to check the Unicode tables.
// Exit status: 0 only when the C++ test ran (not skipped, not filtered away), read every text that was written and
// reported 0 differing tokens; 1 on any difference or a run that proves nothing; 2 when the binary cannot run.
// CI runs it as the ctest entry tiktoken_differential (tests/CMakeLists.txt: 200 KB, a fixed seed).
import { writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { get_encoding } from "tiktoken";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
const targetBytes = Number(option("--bytes", 2_000_000));
const seed = Number(option("--seed", 1));
const sweep = args.includes("--sweep");
const binary = option("--binary", path.join(here, "../../build-tok/tests/unit_tokenize"));
const outPath = option("--out", "/tmp/prefixgate-tiktoken-differential.jsonl");

// mulberry32: small, seeded, reproducible.
let state = seed >>> 0;
function random() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(random() * n);
const pick = (xs) => xs[int(xs.length)];
const repeat = (n, f) => Array.from({ length: n }, f).join("");
const chars = (s) => Array.from(s);

const kSpaces = chars(" \t\n\r\u00a0\u3000\u2003\u0085\u000b\u000c\u2028\u202f");
const kCommonSpaces = chars("    \t\n\n\r");
const kPunct = chars("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'’“”«»—–…·•§¶†‡©®™°±×÷¿¡、。「」『』（）！？");
const kDigits = chars("0123456789١٢٣۴۵१२३०１２３²³¹½¾ⅫⅨ①②𝟙𝟚");
const kScripts = [
  [0x41, 0x5a], [0x61, 0x7a], [0xc0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x530, 0x58f], [0x5d0, 0x5ea],
  [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe7f], [0x10a0, 0x10ff], [0x3040, 0x30ff], [0x4e00, 0x9fff],
  [0xac00, 0xd7a3], [0x1f300, 0x1faff], [0x2600, 0x27bf], [0x300, 0x36f], [0x20000, 0x2a6df],
];
const kContractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'ſ", "'x", "'", "''"];
const kSnippets = [
  "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n", "<|endoftext|>",
  "https://example.com/a?b=1&c=2", "👨‍👩‍👧‍👦", "🏳️‍🌈", "1️⃣", "don't", "I'LL", "WE'RE", "it’s", "\r\n", " \r\n",
];

const randomCase = (s) => chars(s).map((c) => (random() < 0.3 ? c.toUpperCase() : c)).join("");
const scriptChar = () => {
  const [a, b] = pick(kScripts);
  return String.fromCodePoint(a + int(b - a + 1));
};
function anyCodePoint() {
  for (;;) {
    const cp = 0x80 + int(0x110000 - 0x80);
    if (cp < 0xd800 || cp > 0xdfff) return String.fromCodePoint(cp);
  }
}
function whitespace() {
  const n = random() < 0.05 ? 1 + int(300) : 1 + int(6);
  const pool = random() < 0.7 ? kCommonSpaces : kSpaces;
  return repeat(n, () => pick(pool));
}

const atoms = [
  () => randomCase(repeat(1 + int(10), () => String.fromCharCode(97 + int(26)))),
  () => " " + repeat(1 + int(8), () => String.fromCharCode(97 + int(26))),
  () => repeat(1 + int(6), scriptChar),
  () => pick(kContractions).toUpperCase(),
  () => pick(kContractions),
  whitespace,
  whitespace,
  () => repeat(1 + int(random() < 0.1 ? 40 : 5), () => pick(kDigits)),
  () => repeat(1 + int(random() < 0.05 ? 200 : 4), () => pick(kPunct)),
  () => anyCodePoint(),
  () => pick(kSnippets),
  // Rare long runs of one script make pieces of thousands of bytes, which take the heap-based merge.
  () => {
    if (random() > 0.05) return "";
    const [a, b] = pick(kScripts);
    return repeat(60 + int(1500), () => String.fromCodePoint(a + int(Math.min(b - a + 1, 1 + int(40)))));
  },
];

function randomText() {
  const length = random() < 0.1 ? 2000 + int(8000) : 1 + int(400);
  let text = "";
  while (text.length < length) text += pick(atoms)();
  return text;
}

function* sweepTexts() {
  const kPerText = 512;
  for (let start = 0x80; start <= 0x10ffff; start += kPerText) {
    let text = "";
    for (let cp = start; cp < Math.min(start + kPerText, 0x110000); cp++) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      const x = String.fromCodePoint(cp);
      text += `${x}a ${x}${x} 1${x}2 '${x}'s\t${x}\n${x}  b${x}.`;
    }
    yield text;
  }
}

const enc = get_encoding("cl100k_base");
const lines = [];
let bytes = 0;
const addText = (text) => {
  lines.push(JSON.stringify({ text, ids: Array.from(enc.encode_ordinary(text)) }));
  bytes += Buffer.byteLength(text, "utf8");
};
while (bytes < targetBytes) addText(randomText());
const randomBytes = bytes;
if (sweep) for (const text of sweepTexts()) addText(text);
enc.free();
writeFileSync(outPath, lines.join("\n") + "\n");
console.log(`seed ${seed}: ${lines.length} texts, ${randomBytes} random bytes` +
  (sweep ? `, ${bytes - randomBytes} sweep bytes` : "") + ` -> ${outPath}`);

const started = Date.now();
const run = spawnSync(binary, ["--gtest_filter=TiktokenExactness.DifferentialFile"], {
  env: { ...process.env, PREFIXGATE_TIKTOKEN_DIFF_FILE: outPath },
  encoding: "utf8",
  maxBuffer: 64 << 20,
});
if (run.error) {
  console.error(`could not run ${binary}: ${run.error.message}`);
  process.exit(2);
}
const shown = /differential:|Failure|first difference|text:|PASSED|FAILED|SKIPPED|Skipped/;
process.stdout.write(run.stdout.split("\n").filter((l) => shown.test(l))
  .map((l) => l.slice(0, 2000)).join("\n") + "\n");
if (run.stderr) process.stderr.write(run.stderr.slice(-4000));

// A passing exit status alone is not enough: a filter that matches nothing or a skipped test also exits 0.
const summary = /differential: (\d+) texts, (\d+) bytes, (\d+) reference tokens, (\d+) differing tokens/
  .exec(run.stdout);
const problems = [];
if (run.status !== 0) problems.push(`${path.basename(binary)} exited with ${run.status ?? run.signal}`);
if (!summary) {
  problems.push("TiktokenExactness.DifferentialFile printed no summary line (not run, skipped or crashed)");
} else {
  const [texts, , tokens, diffs] = [1, 2, 3, 4].map((i) => Number(summary[i]));
  if (texts !== lines.length) problems.push(`the C++ test read ${texts} texts of the ${lines.length} written`);
  if (tokens === 0) problems.push("no reference tokens were compared");
  if (diffs !== 0) problems.push(`${diffs} differing tokens`);
}
const seconds = ((Date.now() - started) / 1000).toFixed(2);
if (problems.length) {
  console.error(`differential FAILED (seed ${seed}, ${outPath}): ${problems.join("; ")}`);
  process.exit(1);
}
console.log(`differential OK: seed ${seed}, ${summary[1]} texts, ${summary[3]} tokens, 0 differing; ` +
  `C++ side ${seconds} s`);
process.exit(0);
