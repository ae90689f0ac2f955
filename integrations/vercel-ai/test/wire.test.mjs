// What @loopwatch/ai-sdk sends a gateway and does with its answers (node --test), against a
// stand-in gateway on 127.0.0.1 that records each request and answers as it is told. The AI
// SDK itself is driven in tests/integration/test_vercel_ai_agent.py; here the run's settings
// are called as the SDK calls them (toolApproval, then the tool's execute and toModelOutput).
import { test, before, after, beforeEach } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { Loopwatch, WarnedToolError, jsonText } from "../index.js";

let server;
let url;
let requests; // {path, headers, text, body}
let answer; // (path, body) => [status, JSON value]

before(async () => {
  server = createServer((request, response) => {
    let text = "";
    request.on("data", (chunk) => (text += chunk));
    request.on("end", () => {
      const body = JSON.parse(text);
      requests.push({ path: request.url, headers: request.headers, text, body });
      const [status, value] = answer(request.url, body);
      response.writeHead(status, { "content-type": "application/json" });
      response.end(JSON.stringify(value));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${server.address().port}`;
});

after(() => server.close());

beforeEach(() => {
  requests = [];
  answer = (path) => [200, path === "/v1/decide" ? { decision: "allow", message: null, verdicts: [] } : { outputs: [] }];
});

const decides = () => requests.filter((r) => r.path === "/v1/decide").map((r) => r.body);
const events = () => requests.filter((r) => r.path === "/v1/events").map((r) => r.body);
const quiet = { warn: () => {} };

function guard(options = {}) {
  return new Loopwatch({ gatewayUrl: url, logger: quiet, ...options });
}

/** A tool that records its executions. */
function reader(output = "page") {
  const ran = [];
  return { ran, tool: { description: "Read", execute: async (input) => (ran.push(input), typeof output === "function" ? output(input) : output) } };
}

/** One tool call as the SDK makes it: approval, then (unless denied) execute. */
async function call(run, name, input, toolCallId, { approve = true } = {}) {
  const options = { toolCall: { type: "tool-call", toolName: name, toolCallId, input }, tools: run.tools, messages: [] };
  const status = approve ? await run.toolApproval(options) : undefined;
  if (status?.type === "denied") return { status };
  return { status, output: await run.tools[name].execute(input, { toolCallId, messages: [] }) };
}

/** The gateway answers `decision` (with `message`) to the next decide. */
function decideOnce(decision, message, extra = {}) {
  const before = answer;
  let used = false;
  answer = (path, body) => {
    if (path !== "/v1/decide" || used) return before(path, body);
    used = true;
    return [200, { decision, message, verdicts: [], ...extra }];
  };
}

test("a call is decided with its run's and the SDK's ids, and its result reported after it", async () => {
  const { ran, tool } = reader();
  const run = guard({ agentId: "coder", token: "t0k" }).run({ tools: { read: tool }, runId: "r1", sessionId: "s1" });
  const done = await call(run, "read", { path: "a.md" }, "call-1");
  assert.equal(done.status, undefined); // not-applicable: the SDK runs it
  assert.equal(done.output, "page");
  assert.deepEqual(ran, [{ path: "a.md" }]);
  assert.deepEqual(decides(), [
    { run_id: "r1", agent_id: "coder", tool: "read", params: { path: "a.md" }, tool_call_id: "call-1", event_id: "ai-sdk:r1:call-1", session_id: "s1" },
  ]);
  assert.deepEqual(events(), [
    {
      type: "tool_result",
      event_id: "ai-sdk:r1:call-1:result",
      run_id: "r1",
      agent_id: "coder",
      session_id: "s1",
      tool: "read",
      params: { path: "a.md" },
      tool_call_id: "call-1",
      result: "page",
    },
  ]);
  assert.equal(requests[0].headers.authorization, "Bearer t0k");
  assert.equal(requests[0].headers["content-type"], "application/json");
  assert.equal(requests[0].headers["x-loopwatch-texts"], undefined); // loopwatch's words, not OpenClaw's
});

test("a tool call id seen before in the run, or too long for an id, still makes one event each", async () => {
  const { tool } = reader();
  const run = guard().run({ tools: { read: tool }, runId: "r2" });
  await call(run, "read", {}, "c");
  await call(run, "read", {}, "c"); // (some models number their calls anew every turn)
  const long = "x".repeat(600);
  await call(run, "read", {}, long);
  const ids = decides().map((body) => body.event_id);
  assert.deepEqual(ids.slice(0, 2), ["ai-sdk:r2:c", "ai-sdk:r2:c#2"]);
  assert.match(ids[2], /^ai-sdk:sha256-[0-9a-f]{64}$/);
  assert.equal(decides()[2].tool_call_id, long);
  assert.deepEqual(events().map((e) => e.event_id).slice(0, 2), ["ai-sdk:r2:c:result", "ai-sdk:r2:c#2:result"]);
});

test("numbers beyond a double, BigInts and circular values are sent as loopwatch hashes them", async () => {
  const looped = { name: "x" };
  looped.self = looped;
  const { tool } = reader(() => ({ big: 10n ** 30n, looped }));
  const run = guard().run({ tools: { read: tool }, runId: "r3" });
  await call(run, "read", { n: Infinity, m: -Infinity, z: NaN }, "c1");
  assert.match(requests[0].text, /"params":\{"n":"Infinity","m":"-Infinity","z":"NaN"\}/);
  assert.deepEqual(events()[0].result, { big: "1000000000000000000000000000000", looped: { name: "x", self: "[Circular]" } });
  assert.equal(jsonText({ x: 1e400 }), '{"x":"Infinity"}');
});

test("a warning is appended to a text result; any other result gets it in what the model reads", async () => {
  const text = reader("page");
  const data = reader({ page: 1 });
  const run = guard().run({ tools: { read: text.tool, list: data.tool }, runId: "r4" });
  decideOnce("warn", "W!");
  assert.equal((await call(run, "read", {}, "c1")).output, "page\n\nW!");
  assert.equal(events()[0].result, "page"); // loopwatch is told the tool's own result
  decideOnce("warn", "W2");
  const output = (await call(run, "list", {}, "c2")).output;
  assert.deepEqual(output, { page: 1 }); // the tool's result, unchanged
  assert.deepEqual(await run.tools.list.toModelOutput({ toolCallId: "c2", input: {}, output }), {
    type: "content",
    value: [
      { type: "text", text: '{"page":1}' },
      { type: "text", text: "W2" },
    ],
  });
  // a call without a warning reads as the SDK would write it
  await call(run, "list", {}, "c3");
  assert.deepEqual(await run.tools.list.toModelOutput({ toolCallId: "c3", input: {}, output }), { type: "json", value: { page: 1 } });
  assert.deepEqual(await run.tools.read.toModelOutput({ toolCallId: "c1", input: {}, output: "page\n\nW!" }), { type: "text", value: "page\n\nW!" });
});

test("a tool's own toModelOutput is kept, and the warning follows what it gives", async () => {
  const tool = { execute: async () => "raw", toModelOutput: async ({ output }) => ({ type: "text", value: `<${output}>` }) };
  const run = guard().run({ tools: { read: tool }, runId: "r5" });
  decideOnce("warn", "W");
  const { output } = await call(run, "read", {}, "c1");
  assert.equal(output, "raw"); // the tool reads its own output in toModelOutput: not changed
  assert.deepEqual(await run.tools.read.toModelOutput({ toolCallId: "c1", input: {}, output }), { type: "text", value: "<raw>\n\nW" });
});

test("a blocked call is denied with loopwatch's words and does not run; the caller's approval is not asked", async () => {
  const { ran, tool } = reader();
  const asked = [];
  const run = guard().run({ tools: { read: tool }, runId: "r6", toolApproval: () => (asked.push(1), "approved") });
  decideOnce("block", "loopwatch blocked this read call: …", { reason: "generic_repeat" });
  const done = await call(run, "read", {}, "c1");
  assert.deepEqual(done.status, { type: "denied", reason: "loopwatch blocked this read call: …" });
  assert.deepEqual(ran, []);
  assert.deepEqual(asked, []);
  assert.deepEqual(events(), []); // it did not run: nothing to report
  assert.equal(run.stopCondition({ steps: [] }), false);
  // an allowed call: the caller's approval decides next
  assert.equal((await run.toolApproval({ toolCall: { toolName: "read", toolCallId: "c2", input: {} } })), "approved");
  assert.deepEqual(asked, [1]);
});

test("the caller's per-tool approval is asked as the SDK asks it", async () => {
  const { tool } = reader();
  const seen = [];
  const run = guard().run({
    tools: { read: tool },
    runId: "r7",
    toolApproval: { read: (input, options) => (seen.push([input, options.toolCallId, options.toolContext]), { type: "user-approval" }) },
  });
  const status = await run.toolApproval({ toolCall: { toolName: "read", toolCallId: "c1", input: { p: 1 } }, toolsContext: { read: "ctx" }, messages: [] });
  assert.deepEqual(status, { type: "user-approval" });
  assert.deepEqual(seen, [[{ p: 1 }, "c1", "ctx"]]);
});

test("without toolApproval the tool's execute decides: a refused call answers the reason, unrun", async () => {
  const { ran, tool } = reader();
  const run = guard().run({ tools: { read: tool }, runId: "r8" });
  decideOnce("block", "B");
  assert.equal((await call(run, "read", {}, "c1", { approve: false })).output, "B");
  assert.deepEqual(ran, []);
  assert.equal((await call(run, "read", {}, "c2", { approve: false })).output, "page");
  assert.equal(decides().length, 2);
});

test("an abort denies the call, holds the stop condition, and refuses the run's later calls unasked", async () => {
  const { ran, tool } = reader();
  const run = guard().run({ tools: { read: tool }, runId: "r9", stopWhen: () => false });
  decideOnce("abort", "loopwatch stopped this turn: … [tool_loop_recovery_exhausted].", { reason: "tool_loop_recovery_exhausted" });
  const done = await call(run, "read", {}, "c1");
  assert.equal(done.status.type, "denied");
  assert.equal(run.stopCondition({ steps: [] }), true);
  assert.equal(run.stopWhen.length, 2);
  assert.deepEqual(await Promise.all(run.stopWhen.map((stop) => stop({ steps: [] }))), [false, true]);
  assert.deepEqual(run.aborted, { reason: "tool_loop_recovery_exhausted", message: "loopwatch stopped this turn: … [tool_loop_recovery_exhausted]." });
  answer = () => [503, { error: "down" }];
  assert.deepEqual((await call(run, "read", {}, "c2")).status, { type: "denied", reason: run.aborted.message });
  assert.equal((await call(run, "read", {}, "c3", { approve: false })).output, run.aborted.message);
  assert.equal(decides().length, 1);
  assert.deepEqual(ran, []);
});

test("an abort a result caused stops the run; the gateway's next answer gives its words", async () => {
  const { tool } = reader();
  const run = guard().run({ tools: { read: tool }, runId: "r10" });
  const stopped = "loopwatch stopped this turn: … [compaction_loop_persisted].";
  answer = (path) =>
    path === "/v1/decide"
      ? [200, decides().length === 1 ? { decision: "allow" } : { decision: "abort", message: stopped, reason: "compaction_loop_persisted", sticky: true }]
      : [200, { outputs: [{ type: "abort", reason: "compaction_loop_persisted", enforced: true, message: "OpenClaw's sentence" }] }];
  assert.equal((await call(run, "read", {}, "c1")).output, "page");
  assert.deepEqual(run.aborted, { reason: "compaction_loop_persisted", message: undefined });
  assert.equal(run.stopCondition({ steps: [] }), true);
  assert.deepEqual((await call(run, "read", {}, "c2")).status, { type: "denied", reason: stopped });
  assert.equal(run.aborted.message, stopped);
  // an abort the gateway only observed (enforced: false) stops nothing
  const observed = guard().run({ tools: { read: tool }, runId: "r11" });
  answer = (path) => [200, path === "/v1/decide" ? { decision: "allow" } : { outputs: [{ type: "abort", reason: "loop_budget_exhausted", enforced: false }] }];
  await call(observed, "read", {}, "c1");
  assert.equal(observed.aborted, undefined);
});

test("a gateway that cannot decide: the call goes on, or is refused with failOpen false; failures are kept", async () => {
  const logged = [];
  answer = () => [500, { error: "boom" }];
  const open = guard({ logger: { warn: (text) => logged.push(text) } });
  const { ran, tool } = reader();
  const run = open.run({ tools: { read: tool }, runId: "r12" });
  assert.equal((await call(run, "read", {}, "c1")).output, "page");
  assert.equal((await call(run, "read", {}, "c2")).output, "page");
  assert.equal(ran.length, 2);
  assert.equal(open.failureCount, 4); // two decisions, two reports
  assert.ok(open.failures.every((text) => text === `${url}/v1/decide answered 500: boom` || text === `${url}/v1/events answered 500: boom`));
  assert.equal(logged.length, 1); // once a minute
  assert.match(logged[0], /the call goes on \(fail open\)/);
  answer = () => [200, { something: "else" }];
  const closed = guard({ failOpen: false });
  const shut = closed.run({ tools: { read: tool }, runId: "r13" });
  const done = await call(shut, "read", {}, "c1");
  assert.equal(done.status.type, "denied");
  assert.match(done.status.reason, /^loopwatch could not check this call, so it was not run: .*\/v1\/decide answered no decision/);
  assert.equal(ran.length, 2);
  assert.equal(shut.aborted, undefined);
});

test("onEnd reports the run's end and calls the caller's; a call after the end starts a new run", async () => {
  const { tool } = reader();
  const ended = [];
  const run = guard().run({ tools: { read: tool }, onEnd: (event) => ended.push(event) });
  assert.match(run.runId, /^ai-sdk-[0-9a-f-]{36}$/);
  const first = run.runId;
  await call(run, "read", {}, "c1");
  await run.settings.onEnd({ finishReason: "stop" });
  assert.deepEqual(ended, [{ finishReason: "stop" }]);
  assert.deepEqual(events().at(-1), { type: "run_end", event_id: `ai-sdk:${first}:end`, run_id: first, agent_id: "default" });
  await run.end(); // (once)
  assert.equal(events().filter((e) => e.type === "run_end").length, 1);
  await call(run, "read", {}, "c1");
  assert.notEqual(run.runId, first);
  assert.equal(decides().at(-1).run_id, run.runId);
  assert.equal(decides().at(-1).event_id, `ai-sdk:${run.runId}:c1`);
});

test("a streaming tool's outputs pass as they come; the last carries the warning", async () => {
  const tool = {
    async *execute() {
      yield "a";
      yield "b";
    },
  };
  const run = guard().run({ tools: { read: tool }, runId: "r14" });
  decideOnce("warn", "W");
  await run.toolApproval({ toolCall: { toolName: "read", toolCallId: "c1", input: {} } });
  const stream = run.tools.read.execute({}, { toolCallId: "c1", messages: [] });
  assert.equal(typeof stream[Symbol.asyncIterator], "function");
  const seen = [];
  for await (const part of stream) seen.push(part);
  assert.deepEqual(seen, ["a", "b\n\nW"]);
  assert.equal(events()[0].result, "b");
});

test("a tool that throws is reported with its error; a warned call's error carries the warning", async () => {
  const failing = { execute: async () => { throw new TypeError("no such file"); } };
  const run = guard().run({ tools: { read: failing }, runId: "r15" });
  await assert.rejects(call(run, "read", {}, "c1"), (error) => error instanceof TypeError && error.message === "no such file");
  decideOnce("warn", "W");
  await assert.rejects(call(run, "read", {}, "c2"), (error) => {
    assert.ok(error instanceof WarnedToolError);
    assert.equal(String(error), "TypeError: no such file\n\nW"); // what the SDK gives the model
    assert.ok(error.cause instanceof TypeError);
    return true;
  });
  assert.deepEqual(events().map((e) => e.error), ["no such file", "no such file"]);
});

test("tools without execute are left as they are; a guarded tool keeps its other properties", async () => {
  const clientSide = { description: "Ask the user", inputSchema: {} };
  const provider = { type: "provider", id: "openai.web_search", args: {}, execute: async () => "x" };
  const { tool } = reader();
  Object.defineProperty(tool, "experimental_toolCaller", { value: { name: "caller" }, enumerable: false });
  tool.inputSchema = { kind: "schema" };
  const run = guard().run({ tools: { ask: clientSide, search: provider, read: tool } });
  assert.equal(run.tools.ask, clientSide);
  assert.equal(run.tools.search, provider);
  assert.notEqual(run.tools.read, tool);
  assert.deepEqual(run.tools.read.experimental_toolCaller, { name: "caller" });
  assert.equal(run.tools.read.inputSchema, tool.inputSchema);
  assert.equal(await run.toolApproval({ toolCall: { toolName: "search", toolCallId: "s", input: {}, providerExecuted: true } }), undefined);
  assert.equal(await run.toolApproval({ toolCall: { toolName: "ask", toolCallId: "a", input: {} } }), undefined);
  assert.deepEqual(decides(), []); // neither is asked about
});

/** A streaming tool's call as the SDK makes it, its outputs read to the end. */
async function readStream(run, name, toolCallId) {
  const outputs = [];
  for await (const output of run.tools[name].execute({}, { toolCallId, messages: [] })) outputs.push(output);
  return outputs;
}

test("a run made while another run's tool executes is its subagent", async () => {
  const lw = guard();
  let inner;
  const outer = lw.run({
    runId: "parent",
    tools: {
      delegate: {
        execute: async () => {
          inner = lw.run({ tools: { read: reader().tool } });
          await call(inner, "read", {}, "i1");
          return "done";
        },
      },
    },
  });
  await call(outer, "delegate", {}, "d1");
  assert.equal(outer.parentRunId, undefined);
  assert.equal(inner.parentRunId, "parent");
  assert.equal(decides().find((body) => body.tool === "read").parent_run_id, "parent");
  assert.equal(lw.run({}).parentRunId, undefined); // (made outside any tool)
  // a streaming tool's runs too, made between two of its outputs
  let streamed;
  const streaming = lw.run({
    runId: "streaming",
    tools: {
      delegate: {
        async *execute() {
          yield "working";
          streamed = lw.run({});
          yield "done";
        },
      },
    },
  });
  await readStream(streaming, "delegate", "d2");
  assert.equal(streamed.parentRunId, "streaming");
});

test("options of the wrong kind are refused when the guard is made", () => {
  assert.throws(() => new Loopwatch({ gatewayUrl: "127.0.0.1:6070" }), /gatewayUrl/);
  assert.throws(() => new Loopwatch({ failOpen: "false" }), /failOpen/);
  assert.throws(() => new Loopwatch({ timeoutMs: 0 }), /timeoutMs/);
  assert.equal(new Loopwatch({ gatewayUrl: "http://h:1///" }).gatewayUrl, "http://h:1");
});
