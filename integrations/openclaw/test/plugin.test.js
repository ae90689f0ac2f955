// The plugin against a real `loopwatch gateway` process (node --test).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import plugin, { createHooks } from "../index.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const python = process.env.LOOPWATCH_PYTHON ?? join(root, ".venv", "bin", "python");
let gateway;
let url;

before(async () => {
  gateway = spawn(python, ["-m", "loopwatch", "gateway", "--listen", "127.0.0.1:0"], {
    cwd: root,
    env: { ...process.env, LOOPWATCH_GATEWAY_TOKENS: "plugin-token" },
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

function loadPlugin(config) {
  const handlers = {};
  const warnings = [];
  plugin.register({
    pluginConfig: config,
    logger: { warn: (message) => warnings.push(message) },
    on: (name, handler) => {
      handlers[name] = handler;
    },
  });
  return { handlers, warnings };
}

test("a looping agent is blocked with the verdict's message, others are not", async () => {
  const { handlers } = loadPlugin({ gatewayUrl: url, token: "plugin-token", timeoutMs: 5000 });
  assert.deepEqual(Object.keys(handlers).sort(), ["after_tool_call", "before_tool_call"]);
  const ctx = { agentId: "coder", sessionKey: "agent:coder:main" };
  const answers = [];
  for (let n = 0; n < 22; n += 1) {
    const event = { toolName: "read", params: { path: "PLAN.md" }, toolCallId: `t${n}`, runId: "run-7" };
    const answer = await handlers.before_tool_call(event, ctx);
    answers.push(answer);
    if (!answer) await handlers.after_tool_call({ ...event, error: "ENOENT: no such file", durationMs: 3 }, ctx);
  }
  assert.deepEqual(answers.slice(0, 20), Array(20).fill(undefined));
  assert.equal(answers[20].block, true);
  assert.match(answers[20].blockReason, /^CRITICAL: Called read with identical arguments/);
  assert.equal(answers[21].block, true); // the run's second critical: recovery exhausted
  const other = await handlers.before_tool_call({ toolName: "read", params: { path: "PLAN.md" }, runId: "run-8" }, ctx);
  assert.equal(other, undefined);
});

test("a wrong token or a dead gateway fails open, or closed when asked", async () => {
  const wrong = loadPlugin({ gatewayUrl: url, token: "nope" });
  assert.equal(await wrong.handlers.before_tool_call({ toolName: "read", params: {} }, {}), undefined);
  assert.match(wrong.warnings[0], /401/);
  const hooks = createHooks({ gatewayUrl: "http://127.0.0.1:9", failOpen: false, timeoutMs: 500 });
  const refused = await hooks.beforeToolCall({ toolName: "exec", params: { command: "ls" } }, {});
  assert.equal(refused.block, true);
  assert.match(refused.blockReason, /^loopwatch unreachable/);
});
