// Gemini CLI's shipped LoopDetectionService (@google/gemini-cli-core 0.61.0), replayed over the
// real-trajectory corpus.
//
// Usage: node gemini_adapter.mjs [EVENTS|-] [--package DIR]
//   EVENTS: the corpus events (JSON lines, gzip or plain; "-" is stdin); default
//           tests/data/real-trajectories/events.jsonl.gz, else ../shared/corpus/real-trajectories/.
//   DIR:    the installed package; default .bench/quality-node/node_modules/@google/gemini-cli-core
// stdout: one JSON line per run: {"run_id", "calls", "first_stop", "first_warn", "first_abort"}.
//
// What is called: the package's own LoopDetectionService class (dist/src/services/
// loopDetectionService.js), not a re-implementation. Its heuristic tool-call check hashes
// `name:JSON.stringify(args)` of every ToolCallRequest event passed to addAndCheck() and reports a
// loop when the last 5*k keys are one cycle of length k repeated 5 times (k = 1..5; the history
// holds the last 25 keys). It reads no tool result. Its other heuristic, content "chanting", reads
// the model's streamed text (Content events): the corpus has no model text, so it is not fed (a
// tool call resets it anyway). Its LLM check runs only from turnStarted(), once a prompt has had
// 30 turns: this replay never calls turnStarted(), so the LLM check is off and no model is needed.
//
// How GeminiClient uses it (dist/src/core/client.js), and what is reported, per run (one prompt:
// the service is reset once, with the run id as the prompt id, as sendMessageStream does for a
// new prompt):
//   * every tool call of the model's stream goes through addAndCheck() before it is yielded;
//   * a first detection (count 1) breaks the stream before that call is yielded, so the call is
//     never scheduled, and the client starts a recovery turn (clearDetection(), which keeps the
//     call history, then a "Potential loop detected" message to the model):
//     first_stop = the index of that call (1-based over the run's tool calls);
//   * a later detection (count > 1) ends the prompt with a LoopDetected event: first_abort = the
//     index of that call, found by feeding the recorded calls after first_stop, as if the agent had
//     gone on as it did (it would have read the recovery message instead: this is an upper bound);
//   * first_warn is null: the service has no warning short of refusing a call.
//
// Stand-in: the service's context is a Config; this one answers only what the service reads on
// this path: config.config (Config has `config = this`), getDisableLoopDetection() -> false,
// getUsageStatisticsEnabled() -> false (no Clearcut logger), getDebugMode() -> false. Telemetry
// events are buffered by the package (telemetry is not initialised) and never sent.
import { createReadStream, existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createGunzip } from "node:zlib";
import { PassThrough } from "node:stream";

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, "..", "..", "..");

function fail(message) {
  process.stderr.write(`gemini_adapter: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  let events = null;
  let pkg = join(repoRoot, ".bench", "quality-node", "node_modules", "@google", "gemini-cli-core");
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--package") {
      pkg = argv[++i] ?? fail("--package needs a directory");
    } else if (events === null) {
      events = argv[i];
    } else {
      fail(`unexpected argument ${argv[i]}`);
    }
  }
  if (events === null) {
    const inRepo = join(repoRoot, "tests", "data", "real-trajectories", "events.jsonl.gz");
    events = existsSync(inRepo)
      ? inRepo
      : join(repoRoot, "..", "shared", "corpus", "real-trajectories", "events.jsonl.gz");
  }
  return { events, pkg: resolve(pkg) };
}

// Lines of a JSON-lines file or stdin, gunzipped when it starts with the gzip magic.
async function* lines(source) {
  const input = source === "-" ? process.stdin : createReadStream(source);
  const sniff = new PassThrough();
  let decided = false;
  const out = new PassThrough();
  input.on("error", (error) => out.destroy(error));
  input.on("data", (chunk) => {
    if (!decided) {
      decided = true;
      if (chunk[0] === 0x1f && chunk[1] === 0x8b) {
        const gunzip = createGunzip();
        gunzip.on("error", (error) => out.destroy(error));
        sniff.pipe(gunzip).pipe(out);
      } else {
        sniff.pipe(out);
      }
    }
    sniff.write(chunk);
  });
  input.on("end", () => {
    sniff.end();
    if (!decided) out.end();
  });
  yield* createInterface({ input: out, crlfDelay: Infinity });
}

// The runs of the corpus, in the order of their first event: each the list of its tool calls.
async function readRuns(source) {
  const runs = new Map();
  for await (const line of lines(source)) {
    if (!line.trim()) continue;
    const event = JSON.parse(line);
    if (!runs.has(event.run_id)) runs.set(event.run_id, []);
    if (event.type === "tool_call") {
      runs.get(event.run_id).push({ name: event.tool, args: event.params ?? {}, id: event.tool_call_id });
    }
  }
  return runs;
}

function standInConfig() {
  const config = {
    getDisableLoopDetection: () => false,
    getUsageStatisticsEnabled: () => false,
    getDebugMode: () => false,
  };
  config.config = config;
  return config;
}

function replay(LoopDetectionService, GeminiEventType, runId, calls) {
  const service = new LoopDetectionService(standInConfig());
  service.reset(runId, "");
  let firstStop = null;
  let firstAbort = null;
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i];
    const result = service.addAndCheck({
      type: GeminiEventType.ToolCallRequest,
      value: {
        callId: `${call.name}__${call.id ?? i}`,
        name: call.name,
        args: call.args,
        isClientInitiated: false,
        prompt_id: runId,
      },
    });
    if (result.count === 1) {
      firstStop = i + 1;
      service.clearDetection(); // the client's _recoverFromLoop
    } else if (result.count > 1) {
      firstAbort = i + 1;
      break;
    }
  }
  return { run_id: runId, calls: calls.length, first_stop: firstStop, first_warn: null, first_abort: firstAbort };
}

async function main() {
  const { events, pkg } = parseArgs(process.argv.slice(2));
  const manifest = join(pkg, "package.json");
  if (!existsSync(manifest)) fail(`no package at ${pkg} (run tests/bench/quality/peers.sh)`);
  const version = JSON.parse(readFileSync(manifest, "utf8")).version;
  const serviceModule = await import(pathToFileURL(join(pkg, "dist", "src", "services", "loopDetectionService.js")));
  const turnModule = await import(pathToFileURL(join(pkg, "dist", "src", "core", "turn.js")));
  const { LoopDetectionService } = serviceModule;
  const { GeminiEventType } = turnModule;
  if (typeof LoopDetectionService !== "function" || !GeminiEventType?.ToolCallRequest) {
    fail(`${pkg} ${version}: LoopDetectionService or GeminiEventType.ToolCallRequest not where 0.61.0 has them`);
  }
  const runs = await readRuns(events);
  for (const [runId, calls] of runs) {
    process.stdout.write(`${JSON.stringify(replay(LoopDetectionService, GeminiEventType, runId, calls))}\n`);
  }
}

await main();
