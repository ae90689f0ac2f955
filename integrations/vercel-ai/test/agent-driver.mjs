// A real AI SDK agent loop with loopwatch's settings, for tests/integration/test_vercel_ai_agent.py.
//
//   node agent-driver.mjs '<config JSON>'
//
// config: {modules (the node_modules holding ai, @ai-sdk/openai and zod), baseURL (the model's
// Responses API), gateway ({gatewayUrl, timeoutMs, failOpen}), api ("generate" | "stream"),
// approval (false: loopwatch's toolApproval is not given, execute decides), output ("string" |
// "object": what the read tool returns; "error": it throws), steps (the stopWhen step cap), delegate (the model may
// hand a task to a subagent: a tool that runs an agent loop of its own)}.
//
// Prints one JSON object: what the tools executed (their own record), each step (its tool
// calls, the approvals denied, the tool results and errors), the run's finish reason, what
// stopped it, loopwatch's run ids, abort and failures.
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Loopwatch } from "../index.js";

const config = JSON.parse(process.argv[2]);
const require = createRequire(join(config.modules, "noop.js"));
const load = (name) => import(pathToFileURL(require.resolve(name)).href);
const { generateText, streamText, isStepCount, tool } = await load("ai");
const { createOpenAI } = await load("@ai-sdk/openai");
const { z } = await load("zod");

const RESULT = "the same page";
const FAILURE = `ENOENT: no such file or directory, open 'PLAN.md'`;
const openai = createOpenAI({ baseURL: config.baseURL, apiKey: "test-key" });
const model = openai("fake-model");
const warnings = [];
const loopwatch = new Loopwatch({ ...config.gateway, logger: { warn: (text) => warnings.push(text) } });
const executions = [];
const runs = [];

const read = tool({
  description: "Read a file.",
  inputSchema: z.object({ path: z.string() }),
  execute: async ({ path }, { toolCallId }) => {
    if (config.output === "error") {
      executions.push({ tool: "read", toolCallId, input: { path }, error: FAILURE });
      throw new Error(FAILURE);
    }
    const returned = config.output === "object" ? { page: RESULT } : RESULT;
    executions.push({ tool: "read", toolCallId, input: { path }, returned });
    return returned;
  },
});

/** One agent loop: generateText (or streamText) with the tools under a loopwatch run. */
async function agent(prompt, tools) {
  const run = loopwatch.run({ tools, stopWhen: isStepCount(config.steps ?? 100) });
  runs.push(run);
  const settings = { ...run.settings };
  if (config.approval === false) delete settings.toolApproval;
  if (config.api === "stream") {
    const result = streamText({ model, prompt, ...settings, onError: ({ error }) => console.error(error) });
    await result.consumeStream();
    return { run, steps: await result.steps, finishReason: await result.finishReason, stoppedBy: await result.stoppedBy, text: await result.text };
  }
  const result = await generateText({ model, prompt, ...settings });
  return { run, steps: result.steps, finishReason: result.finishReason, stoppedBy: result.stoppedBy, text: result.text };
}

const delegate = tool({
  description: "Hand a task to a subagent.",
  inputSchema: z.object({ task: z.string() }),
  execute: async ({ task }, { toolCallId }) => {
    const inner = await agent(task, { read });
    executions.push({ tool: "delegate", toolCallId, input: { task }, returned: inner.text });
    return inner.text;
  },
});

function step(found) {
  const denied = found.content
    .filter((part) => part.type === "tool-approval-response" && part.approved === false)
    .map((part) => ({ toolCallId: part.toolCall.toolCallId, reason: part.reason }));
  return {
    finishReason: found.finishReason,
    toolCalls: found.toolCalls.map((call) => ({ toolCallId: call.toolCallId, toolName: call.toolName, input: call.input })),
    denied,
    results: found.toolResults.map((result) => ({ toolCallId: result.toolCallId, output: result.output })),
    errors: found.content.filter((part) => part.type === "tool-error").map((part) => ({ toolCallId: part.toolCallId, error: String(part.error) })),
  };
}

const outer = await agent("read the plan", config.delegate ? { delegate, read } : { read });
console.log(
  JSON.stringify({
    executions,
    steps: outer.steps.map(step),
    finishReason: outer.finishReason,
    stoppedBy: outer.stoppedBy,
    text: outer.text,
    runs: runs.map((run) => ({ runId: run.runId, parentRunId: run.parentRunId ?? null, aborted: run.aborted ?? null })),
    failures: loopwatch.failures,
    warnings,
  }),
);
