// OpenClaw's shipped tool-loop detector as a differential oracle (issue 22 §4).
//
// Usage: node openclaw_oracle.mjs <openclaw package dir>
//
// Loads the detector of the installed `openclaw` package (dist/tool-loop-detection-*.mjs:
// detectToolCallLoop, recordToolCall, recordToolCallOutcome, hashToolCall, whose exported
// names are minified aliases, resolved from the module's export statement) and the warning
// de-duplication of its runtime (shouldEmitLoopWarning in dist/agent-tools.before-tool-call-*.mjs,
// evaluated from the shipped source text, with the shipped pruneMapToMaxSize).
//
// stdin: NDJSON, one step a line:
//   {"run": id, "op": "call", "tool": t, "params": p, "toolCallId"?: id, "config"?: {...}}
//   {"run": id, "op": "outcome", "tool": t, "params": p, "toolCallId"?: id,
//    "result"?: v | "error"?: message (a thrown Error) | "errorValue"?: v (thrown as it is)}
//   {"run": id, "op": "end"}                      forget the run
// A run's `config` (its tools.loopDetection block) is given on any line of the run, normally
// its first; it stays until the run ends. Each run has its own session state, as one session
// running one run (the runtime passes {runId} as the scope).
//
// stdout: one JSON line per input line, in order.
//   call:    {"h": argsHash, "s": stuck, "l": level, "d": detector, "c": count, "k": warningKey,
//             "m": message, "p": pairedToolName, "v": livenessSignal, "e": "warn" | "block"}
//            ("e" absent: nothing published, i.e. not stuck or a warning withheld by its bucket)
//   outcome: {"r": resultHash, "o": outcomeKind, "f": failureIdentityHash, "u": unknownToolName,
//             "n": noProgress} of the history record the outcome filled or appended ({} if none)
//   end:     {}
// Absent fields were undefined on the OpenClaw side.
//
// Contract (observe-only): the runtime's admission is followed (detection and call recording
// only when config.enabled === true; outcomes always recorded), except that nothing is fed
// back: a critical verdict blocks nothing, the call is recorded like any other, and the
// outcome the step gives is recorded as it is.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

function fail(message) {
  process.stderr.write(`openclaw_oracle: ${message}\n`);
  process.exit(2);
}

const packageDir = process.argv[2];
if (!packageDir) fail("usage: openclaw_oracle.mjs <openclaw package dir>");
const dist = join(packageDir, "dist");

function distFile(pattern) {
  const found = readdirSync(dist).filter((name) => pattern.test(name));
  if (found.length !== 1) fail(`expected one ${pattern} in ${dist}, found ${found.join(", ") || "none"}`);
  return join(dist, found[0]);
}

/** original name -> exported alias, from the module's `export { a as b, ... }` statement. */
function exportAliases(source, file) {
  const statement = source.match(/export\s*\{([^}]*)\}\s*;?\s*$/);
  if (!statement) fail(`no export statement at the end of ${file}`);
  const aliases = new Map();
  for (const part of statement[1].split(",")) {
    const [name, alias] = part.trim().split(/\s+as\s+/);
    if (name) aliases.set(name, alias ?? name);
  }
  return aliases;
}

async function load(file, names) {
  const source = readFileSync(file, "utf8");
  const aliases = exportAliases(source, file);
  const module = await import(pathToFileURL(file).href);
  const loaded = {};
  for (const name of names) {
    const alias = aliases.get(name);
    if (!alias || typeof module[alias] !== "function") fail(`${file} does not export ${name}`);
    loaded[name] = module[alias];
  }
  return loaded;
}

const detectorFile = distFile(/^tool-loop-detection-(?!config-)[A-Za-z0-9_-]+\.mjs$/);
const { detectToolCallLoop, recordToolCall, recordToolCallOutcome, hashToolCall } = await load(detectorFile, [
  "detectToolCallLoop",
  "recordToolCall",
  "recordToolCallOutcome",
  "hashToolCall",
]);

/** The shipped shouldEmitLoopWarning, evaluated from its source text (it is not exported). */
async function shippedShouldEmit() {
  const file = distFile(/^agent-tools\.before-tool-call-[A-Za-z0-9_-]+\.mjs$/);
  const source = readFileSync(file, "utf8");
  const constant = (name) => {
    const found = source.match(new RegExp(`const ${name} = (\\d+);`));
    if (!found) fail(`${file}: no ${name}`);
    return Number(found[1]);
  };
  const start = source.indexOf("function shouldEmitLoopWarning(");
  if (start < 0) fail(`${file}: no shouldEmitLoopWarning`);
  let depth = 0;
  let end = source.indexOf("{", start);
  for (; end < source.length; end += 1) {
    if (source[end] === "{") depth += 1;
    else if (source[end] === "}" && --depth === 0) break;
  }
  const text = source.slice(start, end + 1);
  const prune = source.match(/import \{[^}]*\b(\w+) as pruneMapToMaxSize\b[^}]*\} from "\.\/(map-size-[\w-]+\.mjs)"/);
  if (!prune) fail(`${file}: no pruneMapToMaxSize import`);
  const mapSize = await import(pathToFileURL(join(dist, prune[2])).href);
  const factory = new Function(
    "pruneMapToMaxSize",
    `const LOOP_WARNING_BUCKET_SIZE = ${constant("LOOP_WARNING_BUCKET_SIZE")};\n` +
      `const MAX_LOOP_WARNING_KEYS = ${constant("MAX_LOOP_WARNING_KEYS")};\n${text}\nreturn shouldEmitLoopWarning;`,
  );
  return factory(mapSize[prune[1]]);
}
const shouldEmitLoopWarning = await shippedShouldEmit();

const runs = new Map(); // run id -> {state, config}

function runOf(step) {
  let run = runs.get(step.run);
  if (!run) {
    run = { state: {}, config: undefined };
    runs.set(step.run, run);
  }
  if (step.config !== undefined) run.config = step.config;
  return run;
}

function onCall(step) {
  const run = runOf(step);
  const { state, config } = run;
  const scope = { runId: step.run };
  const out = { h: hashToolCall(step.tool, step.params) };
  if (config?.enabled !== true) {
    out.s = false;
    return out;
  }
  const result = detectToolCallLoop(state, step.tool, step.params, config, scope);
  out.s = result.stuck;
  if (result.stuck) {
    out.l = result.level;
    out.d = result.detector;
    out.c = result.count;
    out.k = result.warningKey;
    out.m = result.message;
    if (result.pairedToolName !== undefined) out.p = result.pairedToolName;
    if (result.livenessSignal !== undefined) out.v = result.livenessSignal;
    if (result.level === "critical") {
      out.e = "block";
    } else {
      // the runtime's key: evaluateToolLoopCall in agent-tools.before-tool-call-*.mjs
      const baseWarningKey = result.warningKey ?? `${result.detector}:${step.tool}`;
      if (shouldEmitLoopWarning(state, `${step.run}:${baseWarningKey}`, result.count)) out.e = "warn";
    }
  }
  recordToolCall(state, step.tool, step.params, step.toolCallId, config, scope); // observe-only: always
  return out;
}

function onOutcome(step) {
  const { state, config } = runOf(step);
  let error;
  if (typeof step.error === "string") error = new Error(step.error);
  else if ("errorValue" in step) error = step.errorValue;
  const record = recordToolCallOutcome(state, {
    toolName: step.tool,
    toolParams: step.params,
    toolCallId: step.toolCallId,
    result: step.result,
    error,
    config,
    runId: step.run,
  });
  if (!record) return {};
  const out = {};
  if (record.resultHash !== undefined) out.r = record.resultHash;
  if (record.outcomeKind !== undefined) out.o = record.outcomeKind;
  if (record.failureIdentityHash !== undefined) out.f = record.failureIdentityHash;
  if (record.unknownToolName !== undefined) out.u = record.unknownToolName;
  if (record.noProgress === true) out.n = true;
  return out;
}

function handle(line) {
  try {
    return handleStep(JSON.parse(line));
  } catch (error) {
    fail(`${error?.stack ?? error}\non the line: ${line.slice(0, 500)}`);
  }
}

function handleStep(step) {
  switch (step.op) {
    case "call":
      return onCall(step);
    case "outcome":
      return onOutcome(step);
    case "end":
      runs.delete(step.run);
      return {};
    default:
      fail(`unknown op ${JSON.stringify(step.op)}`);
  }
}

let buffered = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buffered += chunk;
  let newline = buffered.indexOf("\n");
  if (newline < 0) return;
  const out = [];
  let start = 0;
  while (newline >= 0) {
    const line = buffered.slice(start, newline);
    if (line.trim()) out.push(JSON.stringify(handle(line)));
    start = newline + 1;
    newline = buffered.indexOf("\n", start);
  }
  buffered = buffered.slice(start);
  if (out.length) process.stdout.write(`${out.join("\n")}\n`);
});
process.stdin.on("end", () => {
  if (buffered.trim()) process.stdout.write(`${JSON.stringify(handle(buffered))}\n`);
});
