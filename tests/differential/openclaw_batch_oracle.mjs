// OpenClaw's shipped batch admission as a differential oracle (issue 22 §3).
//
// Usage: node openclaw_batch_oracle.mjs <openclaw package dir>
//
// Loads `admitToolCallBatch` from the installed package's dist/agent-tools.before-tool-call-*.mjs
// (its exported alias resolved from the module's export statement) and the runtime surface it
// uses itself (dist/agent-tools.before-tool-call.runtime.js: getDiagnosticSessionState,
// recordToolCall, recordToolCallOutcome), so the batch is admitted by the shipped code on the
// shipped session state, warning buckets included.
//
// stdin: NDJSON, one step a line. Each run is one session (sessionKey = sessionId = "s:" + run)
// whose calls carry the run id; loop detection is on ({enabled: true}).
//   {"run": id, "op": "call", "tool": t, "params": p, "toolCallId": id}         recordToolCall
//   {"run": id, "op": "outcome", "tool": t, "params": p, "toolCallId": id,
//    "result"?: v | "error"?: message (a thrown Error)}                          recordToolCallOutcome
//   {"run": id, "op": "batch", "calls": [{"tool", "params", "toolCallId"}]}    admitToolCallBatch;
//        admitted: every call committed at launch, in assistant order (commitReadyCalls)
//   {"run": id, "op": "end"}                                                    forget the run
//
// stdout: one JSON line per input line, in order. A batch's answer:
//   {"refusedBy": toolCallId | null, "detector", "count" (the intervention's, when refused),
//    "warnings": [[toolCallId, count], ...] (emitted, in order; an admitted batch's),
//    "history": [[toolName, argsHash, toolCallId, resultHash | null, outcomeKind | null], ...],
//    "buckets": [[warningKey, bucket], ...]}
// Other steps answer {}.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

function fail(message) {
  process.stderr.write(`openclaw_batch_oracle: ${message}\n`);
  process.exit(2);
}

const packageDir = process.argv[2];
if (!packageDir) fail("usage: openclaw_batch_oracle.mjs <openclaw package dir>");
const dist = join(packageDir, "dist");

function distFile(pattern) {
  const found = readdirSync(dist).filter((name) => pattern.test(name));
  if (found.length !== 1) fail(`expected one ${pattern} in ${dist}, found ${found.join(", ") || "none"}`);
  return join(dist, found[0]);
}

function exportAlias(file, name) {
  const source = readFileSync(file, "utf8");
  const statement = source.match(/export\s*\{([^}]*)\}\s*;?\s*$/);
  if (!statement) fail(`no export statement at the end of ${file}`);
  for (const part of statement[1].split(",")) {
    const [original, alias] = part.trim().split(/\s+as\s+/);
    if (original === name) return alias ?? original;
  }
  fail(`${file} does not export ${name}`);
}

const admissionFile = distFile(/^agent-tools\.before-tool-call-[A-Za-z0-9_-]+\.mjs$/);
const admission = await import(pathToFileURL(admissionFile).href);
const admitToolCallBatch = admission[exportAlias(admissionFile, "admitToolCallBatch")];
if (typeof admitToolCallBatch !== "function") fail("admitToolCallBatch is not a function");
const runtimeModule = await import(pathToFileURL(join(dist, "agent-tools.before-tool-call.runtime.js")).href);
const runtime = runtimeModule.beforeToolCallRuntime;
for (const name of ["getDiagnosticSessionState", "recordToolCall", "recordToolCallOutcome"]) {
  if (typeof runtime?.[name] !== "function") fail(`the before-tool-call runtime has no ${name}`);
}

const config = { enabled: true };

function sessionOf(run) {
  const key = `s:${run}`;
  return {
    ctx: { sessionKey: key, sessionId: key, runId: run, loopDetection: config },
    state: runtime.getDiagnosticSessionState({ sessionKey: key, sessionId: key }),
  };
}

function outcomeError(step) {
  return typeof step.error === "string" ? new Error(step.error) : undefined;
}

async function handle(step) {
  const { ctx, state } = sessionOf(step.run);
  if (step.op === "call") {
    runtime.recordToolCall(state, step.tool, step.params, step.toolCallId, config, { runId: step.run });
    return {};
  }
  if (step.op === "outcome") {
    runtime.recordToolCallOutcome(state, {
      toolName: step.tool,
      toolParams: step.params,
      toolCallId: step.toolCallId,
      ...("result" in step ? { result: step.result } : {}),
      ...(outcomeError(step) ? { error: outcomeError(step) } : {}),
      config,
      runId: step.run,
    });
    return {};
  }
  if (step.op === "end") {
    state.toolCallHistory = [];
    state.toolLoopWarningBuckets = new Map();
    return {};
  }
  if (step.op !== "batch") fail(`unknown op ${step.op}`);
  const calls = step.calls.map((call) => ({ toolCall: { id: call.toolCallId, name: call.tool }, args: call.params }));
  const admitted = await admitToolCallBatch(calls, ctx);
  if (!admitted.intervention && admitted.commitReadyCalls) {
    admitted.commitReadyCalls(step.calls.map((call) => ({ toolCallId: call.toolCallId, args: call.params })));
  }
  const intervention = admitted.intervention;
  return {
    refusedBy: intervention ? intervention.toolCallId : null,
    detector: intervention?.detector ?? null,
    count: intervention?.count ?? null,
    warnings: (admitted.warnings ?? []).map((warning) => [warning.toolCallId, warning.count]),
    history: (state.toolCallHistory ?? []).map((record) => [
      record.toolName,
      record.argsHash,
      record.toolCallId ?? null,
      record.resultHash ?? null,
      record.outcomeKind ?? null,
    ]),
    buckets: [...(state.toolLoopWarningBuckets ?? new Map())],
  };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = await handle(JSON.parse(line));
  } catch (error) {
    fail(`step failed: ${error?.stack ?? error}`);
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
