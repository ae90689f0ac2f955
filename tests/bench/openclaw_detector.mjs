// OpenClaw's shipped tool-loop detector, timed on a benchmark workload (issue 24 §1).
//
// Usage: node openclaw_detector.mjs <openclaw package dir>
//
// The detector module is found by its exports, not by its hashed file name: of the package's
// dist/*.mjs, exactly one must end with an export statement mapping detectToolCallLoop,
// recordToolCall, recordToolCallOutcome and hashToolCall (under minified aliases), and each
// imported function must carry its original `.name`. Anything else is a changed package
// layout: a message on stderr and exit status 2.
//
// stdin: one JSON command a line; stdout: one answer a line, each prefixed with "@@bench "
// (any other stdout line is the detector's own console logging, not an answer).
//   {"op": "load", "path": workload.jsonl}   read, decode and group by run (untimed)
//        -> {"runs": n, "calls": n, "outcomes": n}
//   {"op": "time"}                            one timed pass over the loaded workload
//        -> {"ns": elapsed ns of the detector calls only, "stuck": calls flagged, "calls": n}
// On startup the first answer is {"module": file name, "version": package version, "node": version}.
//
// The replay contract (the same as loopwatch's side in core_bench.py): events are decoded and
// grouped by run before timing; each run gets a fresh state object; per call, in file order:
// detectToolCallLoop -> recordToolCall -> recordToolCallOutcome (its result, right after it in
// the workload), every call and outcome recorded whatever the verdict; config {enabled: true};
// scope = the run id.
import { closeSync, openSync, readFileSync, readSync, readdirSync, fstatSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { createInterface } from "node:readline";

const NAMES = ["detectToolCallLoop", "recordToolCall", "recordToolCallOutcome", "hashToolCall"];
const TAIL_BYTES = 65536;

function fail(message) {
  process.stderr.write(`openclaw_detector: ${message}\n`);
  process.exit(2);
}

function answer(value) {
  process.stdout.write(`@@bench ${JSON.stringify(value)}\n`);
}

function tail(file) {
  const fd = openSync(file, "r");
  try {
    const size = fstatSync(fd).size;
    const length = Math.min(size, TAIL_BYTES);
    const buffer = Buffer.alloc(length);
    readSync(fd, buffer, 0, length, size - length);
    return buffer.toString("utf8");
  } finally {
    closeSync(fd);
  }
}

/** original name -> exported alias, from a module's closing `export { a as b, ... }`. */
function exportAliases(text) {
  const statement = text.match(/export\s*\{([^}]*)\}\s*;?\s*$/);
  const aliases = new Map();
  if (!statement) return aliases;
  for (const part of statement[1].split(",")) {
    const [name, alias] = part.trim().split(/\s+as\s+/);
    if (name) aliases.set(name, alias ?? name);
  }
  return aliases;
}

async function loadDetector(packageDir) {
  const dist = join(packageDir, "dist");
  let files;
  try {
    files = readdirSync(dist).filter((name) => name.endsWith(".mjs"));
  } catch (error) {
    fail(`cannot list ${dist}: ${error.message}`);
  }
  const found = [];
  for (const name of files) {
    const text = tail(join(dist, name));
    if (!text.includes("detectToolCallLoop")) continue;
    const aliases = exportAliases(text);
    if (NAMES.every((original) => aliases.has(original))) found.push({ name, aliases });
  }
  if (found.length !== 1) {
    fail(
      `the package layout changed: expected exactly one ${dist}/*.mjs exporting ${NAMES.join(", ")}, ` +
        `found ${found.length}${found.length ? ` (${found.map((f) => f.name).join(", ")})` : ""}`,
    );
  }
  const { name, aliases } = found[0];
  const module = await import(pathToFileURL(join(dist, name)).href);
  const loaded = {};
  for (const original of NAMES) {
    const exported = module[aliases.get(original)];
    if (typeof exported !== "function" || exported.name !== original) {
      fail(
        `the package layout changed: ${name} exports ${original} as ${aliases.get(original)}, ` +
          `but that is ${typeof exported === "function" ? `function ${exported.name}` : typeof exported}`,
      );
    }
    loaded[original] = exported;
  }
  return { file: name, ...loaded };
}

const packageDir = process.argv[2];
if (!packageDir) fail("usage: openclaw_detector.mjs <openclaw package dir>");
const { file, detectToolCallLoop, recordToolCall, recordToolCallOutcome } = await loadDetector(packageDir);
const version = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8")).version;
const CONFIG = { enabled: true };

/** runs: [{scope, runId, steps: [[0, tool, params, id] | [1, tool, params, id, result]]}] */
let runs = [];
let calls = 0;

function load(path) {
  const byRun = new Map();
  const paramsOf = new Map();
  let outcomes = 0;
  calls = 0;
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (!line) continue;
    const event = JSON.parse(line);
    let run = byRun.get(event.run_id);
    if (!run) {
      run = { runId: event.run_id, scope: { runId: event.run_id }, steps: [] };
      byRun.set(event.run_id, run);
    }
    if (event.type === "tool_call") {
      paramsOf.set(event.tool_call_id, event.params);
      run.steps.push([0, event.tool, event.params, event.tool_call_id]);
      calls += 1;
    } else if (event.type === "tool_result") {
      if (!paramsOf.has(event.tool_call_id)) fail(`${path}: a result before its call: ${event.tool_call_id}`);
      run.steps.push([1, event.tool, paramsOf.get(event.tool_call_id), event.tool_call_id, event.result]);
      outcomes += 1;
    } else {
      fail(`${path}: unexpected event type ${JSON.stringify(event.type)}`);
    }
  }
  runs = [...byRun.values()];
  return { runs: runs.length, calls, outcomes };
}

function timePass() {
  let stuck = 0;
  const start = process.hrtime.bigint();
  for (const run of runs) {
    const state = {};
    const { scope, runId, steps } = run;
    for (const step of steps) {
      if (step[0] === 0) {
        if (detectToolCallLoop(state, step[1], step[2], CONFIG, scope).stuck) stuck += 1;
        recordToolCall(state, step[1], step[2], step[3], CONFIG, scope);
      } else {
        recordToolCallOutcome(state, {
          toolName: step[1],
          toolParams: step[2],
          toolCallId: step[3],
          result: step[4],
          config: CONFIG,
          runId,
        });
      }
    }
  }
  const ns = process.hrtime.bigint() - start;
  return { ns: Number(ns), stuck, calls };
}

answer({ module: file, version, node: process.version });
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  if (command.op === "load") answer(load(command.path));
  else if (command.op === "time") answer(timePass());
  else fail(`unknown op ${JSON.stringify(command.op)}`);
}
