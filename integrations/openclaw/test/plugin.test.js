// The plugin against a real `loopwatch gateway` process (node --test).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import plugin, {
  CHAIN_WAIT_MS,
  MAX_RUNS,
  childChain,
  createHooks,
  isSubagentSessionKey,
  jsonText,
  createState,
  loopWarningNote,
  runScope,
  settings,
  usageOf,
  withoutLoopNotes,
} from "../index.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const python = process.env.LOOPWATCH_PYTHON ?? join(root, ".venv", "bin", "python");
const TOKEN = "plugin-token";
const DEAD = "http://127.0.0.1:9";
// OpenClaw's sentences, as loopwatch's OpenClaw path gives them
const ABORT =
  "OpenClaw stopped this run because tool-loop recovery encountered another critical loop. No blocked tool action was executed.";
const NOTE_10 =
  "[System note: Tool-loop warning after 10 repeated calls. Change your approach or stop if you are not making progress.]";
let gateway;
let url;

before(async () => {
  gateway = spawn(python, ["-m", "loopwatch", "gateway", "--listen", "127.0.0.1:0"], {
    cwd: root,
    env: { ...process.env, LOOPWATCH_GATEWAY_TOKENS: TOKEN },
    stdio: ["ignore", "ignore", "pipe"],
  });
  url = await new Promise((resolve, reject) => {
    let seen = "";
    gateway.stderr.on("data", (chunk) => {
      seen += chunk;
      const found = /gateway at (http:\/\/\S+)/.exec(seen);
      if (found) resolve(found[1]);
    });
    gateway.on("exit", (code) => reject(new Error(`gateway exited ${code}: ${seen}`)));
  });
});

after(() => gateway?.kill("SIGTERM"));

/** The plugin as OpenClaw registers it, with a fake api that keeps what it was given. */
function loadPlugin(config) {
  const handlers = {};
  const options = {};
  const warnings = [];
  const middlewares = [];
  const listeners = new Set();
  plugin.register({
    pluginConfig: config,
    registrationMode: "full",
    logger: { warn: (message) => warnings.push(message) },
    on: (name, handler, opts) => {
      handlers[name] = handler;
      options[name] = opts;
    },
    registerAgentToolResultMiddleware: (handler, options) => middlewares.push({ handler, options }),
    runtime: {
      events: {
        onSessionTranscriptUpdate: (listener) => {
          listeners.add(listener);
          return () => listeners.delete(listener);
        },
      },
    },
  });
  const transcript = (update) => listeners.forEach((listener) => listener(update));
  return { handlers, options, warnings, middlewares, listeners, transcript };
}

const live = () => loadPlugin({ gatewayUrl: url, token: TOKEN, timeoutMs: 5000 });

async function fleetRun(id) {
  const answer = await fetch(`${url}/fleet/run?id=${encodeURIComponent(id)}`, {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  return answer.status === 200 ? answer.json() : null;
}

async function metric(name, labels) {
  const answer = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
  const text = await answer.text();
  const wanted = `${name}{${labels}} `;
  const line = text.split("\n").find((l) => l.startsWith(wanted));
  return line === undefined ? undefined : Number(line.slice(wanted.length));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A server on 127.0.0.1 that answers each request with the next of `bodies` as JSON (the
 * last one again and again with `repeat`): a gateway that misbehaves on purpose. */
async function answering(bodies, repeat = false) {
  const { createServer } = await import("node:http");
  const server = createServer((request, response) => {
    request.resume();
    request.on("end", () => {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(repeat && bodies.length === 1 ? bodies[0] : bodies.shift());
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${server.address().port}` };
}

/** An OpenClaw tool result of a failing read, as after_tool_call and the middleware get it. */
const failedRead = () => ({
  content: [{ type: "text", text: '{\n  "status": "error",\n  "tool": "read",\n  "error": "File not found"\n}' }],
  details: { status: "error", tool: "read", error: "File not found" },
});

/** The same read, `count` times, each result reported (the warned one with OpenClaw's note). */
async function loop(p, runId, count, ctx, start = 0) {
  const answers = [];
  for (let n = start; n < start + count; n += 1) {
    const event = { toolName: "read", params: { path: "PLAN.md" }, toolCallId: `${runId}-t${n}`, runId };
    const answer = await p.handlers.before_tool_call(event, { ...ctx, runId, toolCallId: event.toolCallId });
    answers.push(answer);
    if (answer) continue;
    let result = failedRead();
    for (const { handler } of p.middlewares) {
      const changed = await handler({ toolCallId: event.toolCallId, toolName: "read", args: event.params, result }, { runtime: "openclaw", ...ctx, runId });
      result = changed?.result ?? result;
    }
    await p.handlers.after_tool_call({ ...event, result, durationMs: 3 }, { ...ctx, runId, toolCallId: event.toolCallId });
  }
  return answers;
}

test("a looping agent is blocked with the verdict's message, unchanged; others are not", async () => {
  const p = live();
  assert.deepEqual(Object.keys(p.handlers).sort(), [
    "after_tool_call",
    "agent_end",
    "before_tool_call",
    "subagent_ended",
    "subagent_spawned",
  ]);
  assert.equal(p.middlewares.length, 1);
  assert.deepEqual(p.middlewares[0].options, { runtimes: ["openclaw"] });
  const ctx = { agentId: "coder", sessionKey: "agent:coder:main", sessionId: "s-7" };
  const answers = [];
  for (let n = 0; n < 22; n += 1) {
    const event = { toolName: "read", params: { path: "PLAN.md" }, toolCallId: `t${n}`, runId: "run-7" };
    const answer = await p.handlers.before_tool_call(event, ctx);
    answers.push(answer);
    if (!answer) await p.handlers.after_tool_call({ ...event, error: "ENOENT: no such file", durationMs: 3 }, ctx);
  }
  assert.deepEqual(answers.slice(0, 20), Array(20).fill(undefined));
  const run = await fleetRun("run-7");
  const block = run.verdict_list.find((v) => v.action === "block");
  assert.deepEqual(answers[20], { block: true, blockReason: block.message });
  assert.match(answers[20].blockReason, /^CRITICAL: Called read with identical arguments/);
  assert.deepEqual(answers[21], { block: true, blockReason: ABORT }); // the run's second critical
  assert.equal(run.agent_id, "coder");
  const other = await p.handlers.before_tool_call({ toolName: "read", params: { path: "PLAN.md" }, runId: "run-8" }, ctx);
  assert.equal(other, undefined);
});

test("OpenClaw's limit on before_tool_call is asked above timeoutMs (its expiry refuses the call)", () => {
  assert.equal(loadPlugin({ gatewayUrl: DEAD }).options.before_tool_call.timeoutMs, 15_000);
  assert.equal(loadPlugin({ gatewayUrl: DEAD, timeoutMs: 20_000 }).options.before_tool_call.timeoutMs, 25_000);
  assert.equal(loadPlugin({ gatewayUrl: DEAD, timeoutMs: 12_000 }).options.before_tool_call.timeoutMs, 17_000);
  // beyond setTimeout's 32-bit delay Node fires after 1 ms: OpenClaw would refuse every call
  assert.equal(loadPlugin({ gatewayUrl: DEAD, timeoutMs: 3_000_000_000 }).options.before_tool_call.timeoutMs, 2 ** 31 - 1);
});

test("a wrong token or a dead gateway fails open, or closed when asked", async () => {
  const wrong = loadPlugin({ gatewayUrl: url, token: "nope" });
  assert.equal(await wrong.handlers.before_tool_call({ toolName: "read", params: {}, runId: "wrong-1" }, {}), undefined);
  assert.match(wrong.warnings[0], /401/);
  const hooks = createHooks({ gatewayUrl: DEAD, failOpen: false, timeoutMs: 500 });
  const refused = await hooks.beforeToolCall({ toolName: "exec", params: { command: "ls" }, runId: "dead-1" }, {});
  assert.equal(refused.block, true);
  assert.match(refused.blockReason, /^loopwatch could not check this call, so it was not run: /);
  // where and why (port 9 is one fetch refuses to dial: "bad port"), not fetch's bare "fetch failed"
  assert.match(refused.blockReason, new RegExp(`: ${DEAD}/v1/decide: (bad port|ECONNREFUSED|no answer within 500 ms)$`));
});

test("an answer without a decision is a failure: logged, and refused when failing closed", async () => {
  const { server, url: odd } = await answering(['{"decision": "deny"}', "{}", '{"decision": null}', '{"decision": "deny"}']);
  try {
    const warnings = [];
    const logger = { warn: (line) => warnings.push(line) };
    const open = createHooks({ gatewayUrl: odd, failOpen: true, timeoutMs: 2000 }, logger);
    const call = (hooks, n) => hooks.beforeToolCall({ toolName: "read", params: {}, runId: `nod-${n}` }, {});
    assert.equal(await call(open, 1), undefined);
    assert.equal(await call(open, 2), undefined);
    assert.equal(await call(open, 3), undefined);
    assert.deepEqual(warnings, [
      `loopwatch: ${odd}/v1/decide answered no decision ("deny"); allowing the call`,
      `loopwatch: ${odd}/v1/decide answered no decision (none); allowing the call`,
      `loopwatch: ${odd}/v1/decide answered no decision (null); allowing the call`,
    ]);
    const closed = createHooks({ gatewayUrl: odd, failOpen: false, timeoutMs: 2000 });
    const refused = await call(closed, 4);
    assert.equal(refused.block, true);
    assert.match(refused.blockReason, /answered no decision \("deny"\)$/);
  } finally {
    server.close();
  }
});

test("a URL answering JSON that is not a gateway's fails open (a throw here would refuse the call)", async () => {
  const answers = ["null", "[1, 2]", '{"decision": "warn", "verdicts": {}}', '{"decision": "block", "message": 7}', "<html>"];
  const { server, url: odd } = await answering(answers);
  try {
    const hooks = createHooks({ gatewayUrl: odd, failOpen: true, timeoutMs: 2000 });
    const call = (n) => hooks.beforeToolCall({ toolName: "read", params: { path: "a" }, runId: `odd-${n}` }, {});
    assert.equal(await call(1), undefined); // null
    assert.equal(await call(2), undefined); // an array
    assert.equal(await call(3), undefined); // a warning whose verdicts are not a list
    const blocked = await call(4); // a block whose message is not text
    assert.equal(blocked.block, true);
    assert.equal(blocked.blockReason, "loopwatch: block");
    assert.equal(await call(5), undefined); // not JSON
  } finally {
    server.close();
  }
});

test("a tool result JSON.stringify throws on (a BigInt, a cycle) is still sent", () => {
  const result = { content: [{ type: "text", text: "ok" }], details: { size: 5n } };
  result.details.self = result;
  const shared = { k: 1 };
  assert.equal(
    jsonText({ result, a: shared, b: [shared] }),
    '{"result":{"content":[{"type":"text","text":"ok"}],"details":{"size":"5","self":"[Circular]"}},"a":{"k":1},"b":[{"k":1}]}',
  );
});

test("a number JSON.parse made Infinity (1e400) is sent as OpenClaw's stableStringify writes it", () => {
  assert.equal(
    jsonText({ x: JSON.parse("1e400"), y: -Infinity, z: NaN, w: 1.5 }),
    '{"x":"Infinity","y":"-Infinity","z":"NaN","w":1.5}',
  );
});

test("an aborted run stays refused here, with the abort's message, even with the gateway gone, until agent_end", async () => {
  const p = live();
  const ctx = { agentId: "main", sessionKey: "agent:main:abort", sessionId: "s-abort" };
  const answers = await loop(p, "run-abort", 22, ctx);
  assert.deepEqual(answers[21], { block: true, blockReason: ABORT });
  const seen = await fleetRun("run-abort");
  assert.equal(seen.calls, 22);

  // later calls: refused without asking (the gateway sees no more calls), the same sentence;
  // OpenClaw reports a refused call's outcome to after_tool_call: not passed on
  const later = { toolName: "exec", params: { command: "ls" }, toolCallId: "run-abort-x", runId: "run-abort" };
  assert.deepEqual(await p.handlers.before_tool_call(later, ctx), { block: true, blockReason: ABORT });
  await p.handlers.after_tool_call({ ...later, error: ABORT }, ctx);
  const still = await fleetRun("run-abort");
  assert.equal(still.calls, 22);
  assert.equal(still.results, seen.results);

  // the gateway unreachable (fail-open): the aborted run is still refused, others run
  const dead = loadPlugin({ gatewayUrl: DEAD, timeoutMs: 500 });
  const again = { toolName: "read", params: { path: "x" }, toolCallId: "run-abort-y", runId: "run-abort" };
  assert.deepEqual(await dead.handlers.before_tool_call(again, ctx), { block: true, blockReason: ABORT });
  assert.equal(await dead.handlers.before_tool_call({ ...again, runId: "run-other" }, ctx), undefined);
  assert.equal(dead.warnings.length, 1); // only the other run asked the (dead) gateway

  // agent_end: a run_end for the run, and the run is forgotten here and in the gateway
  await p.handlers.agent_end({ runId: "run-abort", messages: [], success: false }, ctx);
  const ended = await fleetRun("run-abort");
  assert.equal(ended.status, "ended");
  assert.equal(await p.handlers.before_tool_call({ ...again, toolCallId: "run-abort-z" }, ctx), undefined);
});

test("an abort is kept abortMemoryMs; then the gateway is asked again (and answers it, sticky)", async () => {
  const p = loadPlugin({ gatewayUrl: url, token: TOKEN, timeoutMs: 5000, abortMemoryMs: 50 });
  const ctx = { agentId: "main", sessionKey: "agent:main:ttl" };
  const answers = await loop(p, "run-ttl", 22, ctx);
  assert.deepEqual(answers[21], { block: true, blockReason: ABORT });
  const next = { toolName: "read", params: { path: "PLAN.md" }, runId: "run-ttl" };
  assert.deepEqual(await p.handlers.before_tool_call({ ...next, toolCallId: "ttl-a" }, ctx), { block: true, blockReason: ABORT });
  assert.equal((await fleetRun("run-ttl")).calls, 22); // refused here
  await sleep(80);
  assert.deepEqual(await p.handlers.before_tool_call({ ...next, toolCallId: "ttl-b" }, ctx), { block: true, blockReason: ABORT });
  assert.equal((await fleetRun("run-ttl")).calls, 23); // asked: the gateway's sticky abort
});

test("memory is bounded: the oldest runs are forgotten", async () => {
  const hooks = createHooks({ gatewayUrl: url, token: TOKEN, timeoutMs: 5000 }, undefined, createState(3));
  for (const id of ["b1", "b2", "b3", "b4"]) {
    await hooks.beforeToolCall({ toolName: "read", params: {}, runId: `bounded-${id}`, toolCallId: id }, {});
  }
  assert.equal(hooks.state.runs.size, 3);
  assert.equal(hooks.state.runs.get("bounded-b1"), undefined); // the oldest is forgotten
  assert.equal(MAX_RUNS, 10_000);
});

test("a warned call's result gets OpenClaw 2026.9's note; loopwatch hashes the result without it", async () => {
  const p = live();
  const ctx = { agentId: "main", sessionKey: "agent:main:warn", sessionId: "s-warn" };
  const noted = [];
  const middleware = p.middlewares[0].handler;
  p.middlewares[0].handler = async (event, mctx) => {
    const changed = await middleware(event, mctx);
    if (changed) noted.push([event.toolCallId, changed.result.content.at(-1).text, changed.result.content.length]);
    return changed;
  };
  const answers = await loop(p, "run-warn", 21, ctx);
  assert.deepEqual(answers.slice(0, 20), Array(20).fill(undefined)); // a warning lets the call run
  // only the warned call (the 11th: count 10), the note as its own last text block
  assert.deepEqual(noted, [["run-warn-t10", NOTE_10, 2]]);
  assert.equal(loopWarningNote(10), NOTE_10);
  // the 21st call is blocked for 20 identical outcomes: the noted result hashed as the others
  assert.match(answers[20].blockReason, /identical outcomes 20 times/);
  const run = await fleetRun("run-warn");
  assert.deepEqual(
    run.verdict_list.map((v) => [v.action, v.count]),
    [
      ["warn", 10],
      ["block", 20],
    ],
  );
  // a note joined into the last text block ("\n" + note) is taken off as well
  const joined = { content: [{ type: "text", text: `out\n${NOTE_10}` }] };
  assert.deepEqual(withoutLoopNotes(joined), { content: [{ type: "text", text: "out" }] });
  assert.equal(withoutLoopNotes(failedRead()).content.length, 1);
  // every note at the end goes, joined or a block of its own; text after a note keeps it
  const many = {
    content: [
      { type: "text", text: `out\n${NOTE_10}\n${NOTE_10}` },
      { type: "text", text: NOTE_10 },
    ],
  };
  assert.deepEqual(withoutLoopNotes(many), { content: [{ type: "text", text: "out" }] });
  const after = { content: [{ type: "text", text: `out\n${NOTE_10} and more` }] };
  assert.equal(withoutLoopNotes(after), after);
  const inside = { content: [{ type: "text", text: `${NOTE_10}\nout` }] };
  assert.equal(withoutLoopNotes(inside), inside);
});

test("a model turn's usage goes with the turn's first call, once, and waits while the gateway is gone", async () => {
  const p = live();
  const ctx = { agentId: "spender", sessionKey: "agent:spender:main", sessionId: "s-usage" };
  const turn = (runId, input, cost) =>
    p.transcript({
      sessionKey: ctx.sessionKey,
      sessionId: ctx.sessionId,
      agentId: "spender",
      message: {
        role: "assistant",
        provider: "anthropic",
        content: [{ type: "toolCall", id: "x", name: "read", arguments: {} }],
        usage: { input, output: 80, cacheRead: 300, cacheWrite: 20, totalTokens: input + 400, cost: { total: cost } },
        __openclaw: { runId },
      },
    });
  p.transcript({ sessionKey: ctx.sessionKey, message: { role: "user", content: "hi" } }); // not a turn
  turn("run-usage", 1200, 0.0125);
  await loop(p, "run-usage", 2, ctx); // two calls of one turn: the first carries the usage
  assert.equal(await metric("loopwatch_spend_usd_total", 'agent_id="spender"'), 0.0125);
  assert.equal(await metric("loopwatch_tokens_total", 'agent_id="spender",kind="input"'), 1520);
  assert.equal(await metric("loopwatch_tokens_total", 'agent_id="spender",kind="output"'), 80);

  // the gateway unreachable for the next turn's first call: its usage goes with the next one
  turn("run-usage", 1000, 0.01);
  const dead = loadPlugin({ gatewayUrl: DEAD, timeoutMs: 500 });
  assert.equal(await dead.handlers.before_tool_call({ toolName: "read", params: {}, runId: "run-usage", toolCallId: "u-dead" }, ctx), undefined);
  const back = live();
  await loop(back, "run-usage", 1, ctx, 2);
  await sleep(1100); // the gateway renders /metrics at most once a second
  assert.equal(await metric("loopwatch_spend_usd_total", 'agent_id="spender"'), 0.0225);
  assert.equal(await metric("loopwatch_tokens_total", 'agent_id="spender",kind="input"'), 2840);

  // OpenClaw's injected messages and messages without usage carry nothing
  assert.equal(usageOf(undefined), undefined);
  assert.equal(usageOf({ input: 0, output: 0, cost: { total: 0 } }), undefined);
  assert.deepEqual(usageOf({ input: 10, output: 2, cacheRead: 5, cost: { total: 0.5 } }), {
    input_tokens: 15,
    output_tokens: 2,
    cost_usd: 0.5,
  });
});

test("agent_end sends the run's run_end; a dead gateway only logs it", async () => {
  const p = live();
  const ctx = { agentId: "main", sessionKey: "agent:main:end", sessionId: "s-end", runId: "run-end" };
  await loop(p, "run-end", 1, ctx);
  assert.equal((await fleetRun("run-end")).status, "active");
  await p.handlers.agent_end({ messages: [], success: true }, ctx); // runId from ctx, as OpenClaw fills it
  assert.equal((await fleetRun("run-end")).status, "ended");
  const dead = loadPlugin({ gatewayUrl: DEAD, timeoutMs: 500 });
  await dead.handlers.agent_end({ runId: "run-dead-end", messages: [], success: true }, ctx);
  assert.match(dead.warnings[0], /run end not reported/);
});

test("one run scope for every hook: OpenClaw's runId, else the session key; never a shared run", async () => {
  // the convention shared with `loopwatch import` (streams/history/transcripts.py)
  assert.deepEqual(runScope({ runId: "r1" }, { sessionKey: "agent:ops:main", sessionId: "uuid-1", agentId: "ops" }), {
    key: "r1",
    fields: { agent_id: "ops", run_id: "r1", session_id: "uuid-1" },
  });
  assert.deepEqual(runScope({}, { runId: "r2", sessionKey: "agent:ops:main" }), {
    key: "r2",
    fields: { agent_id: "ops", run_id: "r2" },
  });
  // /tools/invoke: no run, the session key is the run
  assert.deepEqual(runScope({}, { sessionKey: "agent:main:main" }), {
    key: "agent:main:main",
    fields: { agent_id: "main", run_id: "agent:main:main" },
  });
  assert.deepEqual(runScope({}, { sessionId: "uuid-3" }), {
    key: "session:uuid-3",
    fields: { agent_id: "main", session_id: "uuid-3" },
  });
  assert.equal(runScope({}, { agentId: "main" }), null);

  const p = live();
  // nothing names a run: the call is not checked (no "openclaw" run collecting everybody's calls)
  assert.equal(await p.handlers.before_tool_call({ toolName: "read", params: {} }, { agentId: "main" }), undefined);
  assert.match(p.warnings[0], /no run id, session key or session id/);
  assert.equal(await fleetRun("openclaw"), null);

  // a result is matched to its call by toolCallId: it carries the call's params; a result
  // whose call was never seen goes to the run its call would have gone to
  const ctx = { agentId: "main", sessionKey: "agent:main:match" };
  const call = { toolName: "read", params: { path: "a" }, toolCallId: "m1" };
  await p.handlers.before_tool_call(call, ctx);
  await p.handlers.after_tool_call({ ...call, params: { path: "a", rewritten: true }, result: failedRead() }, ctx);
  await p.handlers.after_tool_call({ toolName: "read", params: { path: "b" }, toolCallId: "m-unseen", result: failedRead() }, ctx);
  const run = await fleetRun("agent:main:match");
  assert.equal(run.calls, 1);
  assert.equal(run.results, 2);
  const [callArgs, resultArgs] = run.recent.filter((r) => r.kind !== "verdict").map((r) => r.args);
  assert.equal(resultArgs, callArgs);
});

test("options of the wrong kind are told once at start, and what was taken instead", () => {
  const warnings = [];
  createHooks(
    { gatewayUrl: "localhost:6070", failOpen: "false", timeoutMs: "300", abortMemoryMs: -1, abortStopsRun: 1 },
    { warn: (line) => warnings.push(line) },
  );
  assert.deepEqual(warnings, [
    'loopwatch: failOpen must be true or false, not "false" (taken as false)',
    "loopwatch: abortStopsRun must be true or false, not 1 (taken as false)",
    'loopwatch: timeoutMs must be a number of milliseconds above 0, not "300" (taken as 300)',
    "loopwatch: abortMemoryMs must be a number of milliseconds above 0, not -1 (taken as 3600000)",
    'loopwatch: gatewayUrl "localhost:6070" is no http:// or https:// URL: no call can be checked',
  ]);
  const cfg = settings({ failOpen: "false", timeoutMs: "300" });
  assert.equal(cfg.failOpen, false); // (the string "false" was true before)
  assert.equal(cfg.timeoutMs, 300);
  assert.deepEqual(settings({ gatewayUrl: "https://gw.example/" }).problems, []);
});

test("abortStopsRun where this OpenClaw cannot stop a run is said once, and the call still refused", async () => {
  const { server, url: gatewayUrl } = await answering(['{"decision": "abort", "message": "stop here"}'], true);
  try {
    const warnings = [];
    const hooks = createHooks({ gatewayUrl, abortStopsRun: true }, { warn: (line) => warnings.push(line) });
    for (const n of [1, 2]) {
      const answer = await hooks.beforeToolCall({ toolName: "read", params: {}, runId: `stop-${n}` }, { sessionId: `s-${n}` });
      assert.deepEqual(answer, { block: true, blockReason: "stop here" });
    }
    assert.equal(warnings.filter((line) => line.includes("no abortAgentHarnessRun")).length, 1);
  } finally {
    server.close();
  }
});

// -- subagents: delegation chains -------------------------------------------------------------

/** A call of `runId` in session `sessionKey`, as OpenClaw's before_tool_call gives it. */
const callOf = (runId, sessionKey, n, toolName = "read") => [
  { toolName, params: { path: `${runId}-${n}.md` }, toolCallId: `${runId}-c${n}`, runId },
  { agentId: "main", sessionKey, sessionId: `s-${runId}`, runId, toolCallId: `${runId}-c${n}` },
];

/** The plugin with a recording gateway in front of the real one: the bodies it was sent. */
async function recording() {
  const { createServer } = await import("node:http");
  const sent = [];
  const server = createServer((request, response) => {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", async () => {
      const body = Buffer.concat(chunks).toString();
      sent.push({ path: request.url, body: JSON.parse(body) });
      const answer = await fetch(url + request.url, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}`, "x-loopwatch-texts": "openclaw" },
        body,
      });
      response.writeHead(answer.status, { "content-type": "application/json" });
      response.end(await answer.text());
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const p = loadPlugin({ gatewayUrl: `http://127.0.0.1:${server.address().port}`, timeoutMs: 5000 });
  return { p, sent, server };
}

test("a subagent's session key is told from others as OpenClaw does", () => {
  assert.equal(isSubagentSessionKey("agent:main:subagent:1f2e"), true);
  assert.equal(isSubagentSessionKey("agent:ops:subagent:incognito-9"), true);
  assert.equal(isSubagentSessionKey("subagent:1f2e"), true);
  assert.equal(isSubagentSessionKey("agent:main:main"), false);
  assert.equal(isSubagentSessionKey("agent:subagent:main"), false);
  assert.equal(isSubagentSessionKey(undefined), false);
  assert.deepEqual(childChain({ runId: "r0" }), { parent_run_id: "r0", root_run_id: "r0", depth: 1 });
  assert.deepEqual(childChain({ runId: "r1", chain: { parent_run_id: "r0", root_run_id: "r0", depth: 1 } }), {
    parent_run_id: "r1",
    root_run_id: "r0",
    depth: 2,
  });
});

test("subagents: each child's first call carries its chain (parent, root, depth), later calls none; subagent_ended ends its run", async () => {
  const { p, sent, server } = await recording();
  try {
    // the main run (a root) calls sessions_spawn; OpenClaw launches the child, then runs
    // subagent_spawned (ctx.requesterSessionKey: the parent's session)
    assert.equal(await p.handlers.before_tool_call(...callOf("chain-main", "agent:main:chain", 0, "sessions_spawn")), undefined);
    const spawned = (child, childKey, parentKey) =>
      p.handlers.subagent_spawned(
        { runId: child, childSessionKey: childKey, agentId: "main", mode: "run", threadRequested: false },
        { runId: child, childSessionKey: childKey, requesterSessionKey: parentKey },
      );
    await spawned("chain-child", "agent:main:subagent:c1", "agent:main:chain");
    for (const n of [0, 1]) await loop(p, "chain-child", 1, { agentId: "main", sessionKey: "agent:main:subagent:c1", runId: "chain-child" }, n);
    // the child spawns its own: two deep, the same root
    await p.handlers.before_tool_call(...callOf("chain-child", "agent:main:subagent:c1", 2, "sessions_spawn"));
    await spawned("chain-grandchild", "agent:main:subagent:c2", "agent:main:subagent:c1");
    await p.handlers.before_tool_call(...callOf("chain-grandchild", "agent:main:subagent:c2", 0));
    await p.handlers.before_tool_call(...callOf("chain-grandchild", "agent:main:subagent:c2", 1));

    const decides = sent.filter((r) => r.path === "/v1/decide").map((r) => r.body);
    const chainOf = (body) => ({ parent_run_id: body.parent_run_id, root_run_id: body.root_run_id, depth: body.depth });
    const none = { parent_run_id: undefined, root_run_id: undefined, depth: undefined };
    assert.deepEqual(
      decides.map((body) => [body.run_id, chainOf(body)]),
      [
        ["chain-main", none],
        ["chain-child", { parent_run_id: "chain-main", root_run_id: "chain-main", depth: 1 }],
        ["chain-child", none],
        ["chain-child", none],
        ["chain-grandchild", { parent_run_id: "chain-child", root_run_id: "chain-main", depth: 2 }],
        ["chain-grandchild", none],
      ],
    );
    // the gateway keeps the chain the first events gave
    const grandchild = await fleetRun("chain-grandchild");
    assert.deepEqual([grandchild.parent_run_id, grandchild.root_run_id, grandchild.depth], ["chain-child", "chain-main", 2]);

    // subagent_ended: a run_end for the child's run (the fields its calls named), forgotten here
    await p.handlers.subagent_ended(
      { targetSessionKey: "agent:main:subagent:c2", targetKind: "subagent", reason: "subagent-complete", runId: "chain-grandchild", outcome: "ok" },
      { runId: "chain-grandchild", childSessionKey: "agent:main:subagent:c2", requesterSessionKey: "agent:main:subagent:c1" },
    );
    const ends = sent.filter((r) => r.path === "/v1/events" && r.body.type === "run_end").map((r) => r.body);
    assert.deepEqual(
      ends.map(({ event_id, ...fields }) => fields),
      [{ type: "run_end", agent_id: "main", run_id: "chain-grandchild", session_id: "s-chain-grandchild" }],
    );
    assert.equal((await fleetRun("chain-grandchild")).status, "ended");
    assert.equal((await fleetRun("chain-child")).status, "active");
  } finally {
    server.close();
  }
});

test("a subagent's first call that comes before its subagent_spawned waits for it (bounded)", async () => {
  const { p, sent, server } = await recording();
  try {
    await p.handlers.before_tool_call(...callOf("early-main", "agent:main:early", 0, "sessions_spawn"));
    const started = Date.now();
    const first = p.handlers.before_tool_call(...callOf("early-child", "agent:main:subagent:e1", 0));
    await sleep(50); // the child asks first; OpenClaw's hook comes later
    await p.handlers.subagent_spawned(
      { runId: "early-child", childSessionKey: "agent:main:subagent:e1", agentId: "main", mode: "run", threadRequested: false },
      { runId: "early-child", childSessionKey: "agent:main:subagent:e1", requesterSessionKey: "agent:main:early" },
    );
    assert.equal(await first, undefined);
    assert.ok(Date.now() - started < CHAIN_WAIT_MS);
    const child = sent.filter((r) => r.path === "/v1/decide").map((r) => r.body).find((b) => b.run_id === "early-child");
    assert.deepEqual([child.parent_run_id, child.root_run_id, child.depth], ["early-main", "early-main", 1]);

    // a subagent whose spawn never comes is a root, after one wait (its later calls do not wait)
    const lone = Date.now();
    await p.handlers.before_tool_call(...callOf("lone-child", "agent:main:subagent:l1", 0));
    assert.ok(Date.now() - lone >= CHAIN_WAIT_MS - 10);
    const again = Date.now();
    await p.handlers.before_tool_call(...callOf("lone-child", "agent:main:subagent:l1", 1));
    assert.ok(Date.now() - again < CHAIN_WAIT_MS);
    const lones = sent.filter((r) => r.path === "/v1/decide" && r.body.run_id === "lone-child").map((r) => r.body);
    assert.equal(lones.length, 2);
    assert.ok(lones.every((b) => b.parent_run_id === undefined && b.depth === undefined));
    // a call of a main session never waits
    const plain = Date.now();
    await p.handlers.before_tool_call(...callOf("plain-run", "agent:main:plain", 0));
    assert.ok(Date.now() - plain < CHAIN_WAIT_MS);
  } finally {
    server.close();
  }
});

test("a spawn from a session with no run seen here is said, and the child is a root", async () => {
  const p = live();
  p.handlers.subagent_spawned(
    { runId: "orphan", childSessionKey: "agent:main:subagent:o1", agentId: "main", mode: "run", threadRequested: false },
    { runId: "orphan", childSessionKey: "agent:main:subagent:o1", requesterSessionKey: "agent:main:unknown" },
  );
  assert.match(p.warnings[0], /subagent orphan of a session with no run seen here: it is a chain's root/);
  // subagent_ended of a child whose calls were never seen: its spawned run id is ended
  await p.handlers.subagent_ended(
    { targetSessionKey: "agent:main:subagent:o1", targetKind: "subagent", reason: "subagent-error", runId: "orphan" },
    { runId: "orphan", childSessionKey: "agent:main:subagent:o1" },
  );
  const dead = loadPlugin({ gatewayUrl: DEAD, timeoutMs: 500 });
  await dead.handlers.subagent_ended({ targetSessionKey: "agent:main:subagent:o2", runId: "o2" }, {});
  assert.match(dead.warnings[0], /subagent run end not reported/);
});
