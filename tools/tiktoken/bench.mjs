// Throughput of the npm tiktoken encoder (cl100k_base, encode_ordinary) on ~1 MB of mixed English and code, and,
// with --binary, of prefixgate's bench/tokenize_bench.cpp on the same file in the same run, with the ratio.
//
// The text is rebuilt deterministically each run from files every Debian system has: the licence texts in
// /usr/share/common-licenses (English), Python's standard library and libstdc++'s headers (code), interleaved.
//
// Usage: node bench.mjs [--binary path/to/tokenize_bench] [--text /tmp/prefixgate-tokenize-bench.txt]
//                       [--seconds 3]
import { readdirSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { get_encoding } from "tiktoken";

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
const textPath = option("--text", "/tmp/prefixgate-tokenize-bench.txt");
const binary = option("--binary", null);
const seconds = Number(option("--seconds", 3));
const kTextBytes = 1 << 20;

function listFiles(dir, suffix) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((f) => f.endsWith(suffix)).sort().map((f) => path.join(dir, f));
}

function buildText() {
  const english = listFiles("/usr/share/common-licenses", "").filter((f) => !/GFDL$|GPL$|LGPL$/.test(f));
  const python = listFiles(`/usr/lib/python3.${process.env.PYTHON_MINOR ?? "11"}`, ".py");
  const cpp = listFiles("/usr/include/c++/12/bits", ".h");
  if (english.length === 0 || python.length === 0 || cpp.length === 0) {
    throw new Error("expected /usr/share/common-licenses, /usr/lib/python3.11 and /usr/include/c++/12 (Debian 12)");
  }
  const parts = [];
  let bytes = 0;
  for (let i = 0; bytes < kTextBytes; i++) {
    for (const file of [english[i % english.length], python[i % python.length], cpp[i % cpp.length]]) {
      const content = readFileSync(file);
      parts.push(content);
      bytes += content.length;
    }
  }
  let buffer = Buffer.concat(parts).subarray(0, kTextBytes);
  let end = buffer.length;
  while (end > 0 && (buffer[end - 1] & 0xc0) === 0x80) end--;  // never cut a UTF-8 sequence
  if (end > 0 && buffer[end - 1] >= 0xc0) end--;
  return buffer.subarray(0, end).toString("utf8");
}

const text = buildText();
writeFileSync(textPath, text);
const textBytes = Buffer.byteLength(text, "utf8");

// Both wall-clock and CPU time are reported: on a shared machine the wall clock also counts time spent waiting
// for a core, so CPU time is the fairer of the two.
const cpuSeconds = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
const enc = get_encoding("cl100k_base");
let tokens = 0;
for (let i = 0; i < 2; i++) tokens = enc.encode_ordinary(text).length;  // warm up
let runs = 0;
const start = process.hrtime.bigint();
const cpuStart = cpuSeconds();
let elapsed = 0;
while (elapsed < seconds || runs < 3) {
  enc.encode_ordinary(text);
  runs++;
  elapsed = Number(process.hrtime.bigint() - start) / 1e9;
}
const cpu = cpuSeconds() - cpuStart;
enc.free();
const mbs = (secondsPerRun) => textBytes / secondsPerRun / 1e6;
const npm = { wall: mbs(elapsed / runs), cpu: mbs(cpu / runs) };
const version = JSON.parse(readFileSync(new URL("./node_modules/tiktoken/package.json", import.meta.url))).version;
console.log(`text: ${textPath}, ${textBytes} bytes, ${tokens} cl100k tokens`);
console.log(`npm tiktoken ${version} (node ${process.versions.node}): ${npm.wall.toFixed(1)} MB/s wall, ` +
  `${npm.cpu.toFixed(1)} MB/s CPU (${runs} runs, ${(elapsed * 1000 / runs).toFixed(1)} ms each)`);

if (binary) {
  const run = spawnSync(binary, ["--benchmark_filter=BM_TiktokenEncode", "--benchmark_format=json"], {
    env: { ...process.env, PREFIXGATE_TOKENIZE_BENCH_TEXT: textPath },
    encoding: "utf8",
  });
  if (run.status !== 0) {
    console.error(run.stderr || run.error?.message);
    process.exit(1);
  }
  const result = JSON.parse(run.stdout).benchmarks.find((b) => b.name.startsWith("BM_TiktokenEncode"));
  if (!result || result.error_occurred) {
    console.error(`prefixgate benchmark failed: ${result?.error_message ?? "no result"}`);
    process.exit(1);
  }
  const unit = { ns: 1e-9, us: 1e-6, ms: 1e-3, s: 1 }[result.time_unit];
  const ours = { wall: mbs(result.real_time * unit), cpu: mbs(result.cpu_time * unit) };
  console.log(`prefixgate TiktokenTokenizer: ${ours.wall.toFixed(1)} MB/s wall, ${ours.cpu.toFixed(1)} MB/s CPU ` +
    `(${result.iterations} runs, ${result.real_time.toFixed(2)} ms each, ${result.tokens} tokens)`);
  console.log(`ratio: ${(ours.wall / npm.wall).toFixed(1)}x the npm encoder (wall), ` +
    `${(ours.cpu / npm.cpu).toFixed(1)}x (CPU)`);
  if (result.tokens !== tokens) {
    console.error(`token counts differ: prefixgate ${result.tokens}, npm ${tokens}`);
    process.exit(1);
  }
}
