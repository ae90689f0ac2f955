// loopwatch for the Vercel AI SDK (`ai` 7): every tool call of a generateText / streamText run
// asks a loopwatch gateway first (POST /v1/decide), and its result is reported after it
// (POST /v1/events), so loopwatch's rules see the calls and their outcomes.
//
// What the SDK gives, and what each part uses:
// * `toolApproval` (a generic approval function of generateText / streamText) → /v1/decide:
//   a block or an abort answers {type: "denied", reason}; the SDK does not run the tool and
//   sends the model an `execution-denied` tool result carrying the reason (loopwatch's words);
// * each tool's `execute`, wrapped → the result (or the error) is reported; a warned call runs
//   and the warning is appended to the result the model reads (a string result gets it
//   appended; any other, through the tool's `toModelOutput`, as a text part after it; an error,
//   as a WarnedToolError whose message ends with it);
// * `stopWhen` → a stop condition that holds once the run was aborted: the loop ends after the
//   step that held the aborted call (the run's later calls are refused here, unasked);
// * `onEnd` → a `run_end` for the run.
// A call whose decision the approval function did not see (no `toolApproval` given, or a tool
// approved in an earlier request) is decided in `execute`: refused there, its result is the
// refusal's text. A gateway that cannot be asked lets the call go on (failOpen, the default) or
// refuses it (failOpen: false).

import { AsyncLocalStorage } from "node:async_hooks";

/** The failures a guard keeps (the count goes on). */
export const FAILURES_KEPT = 100;
/** A failure is logged at most once a minute (with the count since). */
const LOG_EVERY_MS = 60_000;
/** Decisions kept between a call's approval and its execution, per run. */
const PENDING_KEPT = 1_000;
/** Notes kept for results the model reads through `toModelOutput`, per run. */
const NOTES_KEPT = 1_000;
/** The longest id the gateway takes (UTF-8 bytes). */
const MAX_ID_BYTES = 512;

const env = globalThis.process?.env ?? {};
// the gateway and token the hooks use too (LOOPWATCH_GATEWAY_URL, LOOPWATCH_GATEWAY_TOKEN)
const DEFAULTS = {
  gatewayUrl: env.LOOPWATCH_GATEWAY_URL || "http://127.0.0.1:6070",
  token: env.LOOPWATCH_GATEWAY_TOKEN || undefined,
  agentId: "default",
  timeoutMs: 2_000,
  failOpen: true,
  logger: console,
};

const DECISIONS = new Set(["allow", "warn", "block", "abort"]);
const ALLOW = Object.freeze({ action: "allow", text: undefined, reason: undefined });

/** The run whose tool is executing: a run started inside it (a subagent) is its child. */
const callingRun = new AsyncLocalStorage();

/** JSON of a value a tool may give or take: a BigInt as its digits, a value that contains itself
 * as "[Circular]" (JSON.stringify throws on both), and ±Infinity / NaN as the strings OpenClaw's
 * stableStringify writes, which loopwatch hashes as it hashes the number `1e400` a model wrote
 * (docs/wire-numbers.md; JSON.stringify would write null). */
export function jsonText(value) {
  const open = [];
  return JSON.stringify(value, function (key, item) {
    if (typeof item === "bigint") return item.toString();
    if (typeof item === "number" && !Number.isFinite(item)) return String(item);
    if (item === null || typeof item !== "object") return item;
    while (open.length && open.at(-1) !== this) open.pop(); // back out of finished objects
    if (open.includes(item)) return "[Circular]";
    open.push(item);
    return item;
  });
}

/** The options over their defaults; a wrong one throws when the guard is made, not at the
 * first tool call. */
function settings(options = {}) {
  const merged = { ...DEFAULTS };
  for (const [key, value] of Object.entries(options ?? {})) if (value !== undefined) merged[key] = value;
  let url = String(merged.gatewayUrl);
  while (url.endsWith("/")) url = url.slice(0, -1);
  if (!/^https?:\/\/[^/]/i.test(url)) {
    throw new TypeError(`gatewayUrl ${JSON.stringify(merged.gatewayUrl)}: an http:// or https:// URL with a host, e.g. http://127.0.0.1:6070`);
  }
  merged.gatewayUrl = url;
  if (typeof merged.failOpen !== "boolean") throw new TypeError(`failOpen must be true or false, not ${JSON.stringify(merged.failOpen)}`);
  const timeout = merged.timeoutMs;
  if (typeof timeout !== "number" || !Number.isFinite(timeout) || timeout <= 0) {
    throw new TypeError(`timeoutMs must be a number of milliseconds above 0, not ${JSON.stringify(timeout)}`);
  }
  if (typeof merged.agentId !== "string" || !merged.agentId) throw new TypeError("agentId must be a non-empty string");
  return merged;
}

/** A Map that forgets its oldest entries beyond `limit`. */
class Recent extends Map {
  constructor(limit) {
    super();
    this.limit = limit;
  }
  set(key, value) {
    this.delete(key);
    super.set(key, value);
    while (this.size > this.limit) this.delete(this.keys().next().value);
    return this;
  }
}

function utf8Bytes(text) {
  return new TextEncoder().encode(text).length;
}

/** An event id the gateway takes: `ai-sdk:<text>`, or `ai-sdk:sha256-<its digest>` when that
 * is too long. */
async function eventId(text) {
  const id = `ai-sdk:${text}`;
  if (utf8Bytes(id) <= MAX_ID_BYTES) return id;
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return `ai-sdk:sha256-${Array.from(digest, (byte) => byte.toString(16).padStart(2, "0")).join("")}`;
}

/** Why a request failed, in a few words: no answer in time, or the network's own cause. */
function failure(error, timeoutMs) {
  if (error?.name === "TimeoutError" || error?.name === "AbortError") return `no answer within ${timeoutMs} ms`;
  const cause = error?.cause;
  return String(cause?.code ?? cause?.message ?? error?.message ?? error);
}

/** An error's text as loopwatch records it (Python's `str(exc)`, else the error's name). */
function errorText(error) {
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}

function isAsyncIterable(value) {
  return value != null && typeof value[Symbol.asyncIterator] === "function";
}

function isAsyncGeneratorFunction(fn) {
  return typeof fn === "function" && fn[Symbol.toStringTag] === "AsyncGeneratorFunction";
}

/** A warned call's error: the tool's own (`cause`, whose name it keeps), its message followed by
 * the warning, which the model reads as the call's error. */
export class WarnedToolError extends Error {
  constructor(error, warning) {
    super(`${errorText(error)}\n\n${warning}`, { cause: error });
    this.name = error instanceof Error ? error.name : "Error";
  }
}

/** The error a call's tool threw, as the model will read it (a warned call's gets the warning). */
function notedError(error, given) {
  return given.action === "warn" && given.text ? new WarnedToolError(error, given.text) : error;
}

/** What the SDK gives the model for an output when the tool has no `toModelOutput` of its own. */
function defaultModelOutput(output) {
  if (typeof output === "string") return { type: "text", value: output };
  const text = JSON.stringify(output);
  return { type: "json", value: text === undefined ? null : JSON.parse(text) };
}

/** A tool's model output with loopwatch's note after it. */
function withNote(modelOutput, note) {
  switch (modelOutput?.type) {
    case "text":
    case "error-text":
      return { ...modelOutput, value: modelOutput.value ? `${modelOutput.value}\n\n${note}` : note };
    case "json":
    case "error-json":
      return {
        type: "content",
        value: [
          { type: "text", text: JSON.stringify(modelOutput.value) },
          { type: "text", text: note },
        ],
      };
    case "content":
      return { ...modelOutput, value: [...modelOutput.value, { type: "text", text: note }] };
    default:
      return modelOutput;
  }
}

/** What to do with a call: allow, warn (run it, `text` with the result), block (do not run it,
 * answer `text`) or abort (do not run it, answer `text`, end the run). */
function ruling(answer) {
  const action = answer.decision;
  if (action !== "warn" && action !== "block" && action !== "abort") return ALLOW;
  const text = typeof answer.message === "string" && answer.message ? answer.message : `loopwatch: ${action}`;
  return { action, text, reason: typeof answer.reason === "string" ? answer.reason : undefined };
}

/** The enforced abort among a tool result's outputs, if any. */
function abortIn(outputs) {
  return (Array.isArray(outputs) ? outputs : []).find(
    (out) => out && typeof out === "object" && out.type === "abort" && out.enforced !== false,
  );
}

/**
 * loopwatch for the AI SDK: one gateway, the runs of one process. `run()` makes the settings
 * of one generateText / streamText call.
 */
export class Loopwatch {
  /** @param {import("./index.d.ts").LoopwatchOptions} [options] */
  constructor(options = {}) {
    const cfg = settings(options);
    this.gatewayUrl = cfg.gatewayUrl;
    this.token = cfg.token;
    this.agentId = cfg.agentId;
    this.timeoutMs = cfg.timeoutMs;
    this.failOpen = cfg.failOpen;
    this.logger = cfg.logger;
    /** The latest failures (the newest last): a gateway that could not be asked. */
    this.failures = [];
    /** How many failures there were in all. */
    this.failureCount = 0;
    this._lastLog = undefined;
    this._unlogged = 0;
  }

  /** The settings of one generateText / streamText call, as one loopwatch run. */
  run(options = {}) {
    return new LoopwatchRun(this, options);
  }

  /** POST `body` to `path`; the gateway's JSON object, or an Error saying why not. */
  async post(path, body) {
    const where = this.gatewayUrl + path;
    const headers = { "content-type": "application/json" };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    let answer;
    const signal = AbortSignal.timeout(this.timeoutMs);
    try {
      answer = await fetch(where, { method: "POST", headers, body: jsonText(body), signal });
    } catch (error) {
      throw new Error(`${where}: ${failure(error, this.timeoutMs)}`);
    }
    let data;
    try {
      data = await answer.json();
    } catch (error) {
      if (error?.name === "TimeoutError" || error?.name === "AbortError") {
        throw new Error(`${where}: no whole answer within ${this.timeoutMs} ms`);
      }
      data = undefined; // not JSON
    }
    const object = data !== null && typeof data === "object" && !Array.isArray(data);
    if (!answer.ok) {
      const said = object && typeof data.error === "string" ? `: ${data.error}` : "";
      throw new Error(`${where} answered ${answer.status}${said}`);
    }
    if (!object) throw new Error(`${where} answered no JSON object`);
    return data;
  }

  /** A failure kept and logged (at most once a minute); `refuse`: what a call that could not
   * be decided gets (a refusal when failing closed, else allow). */
  fail(error, refuse) {
    const text = String(error?.message ?? error);
    this.failures.push(text);
    if (this.failures.length > FAILURES_KEPT) this.failures.splice(0, this.failures.length - FAILURES_KEPT);
    this.failureCount += 1;
    const closed = refuse && !this.failOpen;
    const now = Date.now();
    if (this._lastLog === undefined || now - this._lastLog >= LOG_EVERY_MS) {
      const since = this._unlogged ? ` (and ${this._unlogged} more since the last message)` : "";
      const then = refuse ? (closed ? "the call is refused (failOpen: false)" : "the call goes on (fail open)") : "not reported";
      this.logger?.warn?.(`loopwatch could not ask the gateway: ${text}; ${then}${since}`);
      this._lastLog = now;
      this._unlogged = 0;
    } else {
      this._unlogged += 1;
    }
    if (!closed) return ALLOW;
    return { action: "block", text: `loopwatch could not check this call, so it was not run: ${text}`, reason: "unavailable" };
  }
}

/** One loopwatch run: the tools, approval function, stop condition and end callback of one
 * generateText / streamText call. */
export class LoopwatchRun {
  constructor(guard, options = {}) {
    const { tools, stopWhen, toolApproval, onEnd, runId, sessionId, parentRunId } = options ?? {};
    this.guard = guard;
    this._givenId = runId;
    this._generation = 0;
    this.runId = runId ?? `ai-sdk-${globalThis.crypto.randomUUID()}`;
    this.sessionId = sessionId;
    /** The run whose tool started this one (a subagent), given or found. */
    this.parentRunId = parentRunId ?? callingRun.getStore();
    /** Set once loopwatch aborted the run: {reason, message}. */
    this.aborted = undefined;
    this._pending = new Recent(PENDING_KEPT); // toolCallId → the call and its ruling, approval → execute
    this._notes = new Recent(NOTES_KEPT); // toolCallId → a warning for toModelOutput
    this._seen = new Recent(PENDING_KEPT * 10); // toolCallId → how often this run saw it
    this._ended = false;
    this._userApproval = toolApproval;
    this._userOnEnd = onEnd;
    this.tools = this._wrapTools(tools ?? {});
    /** The stop condition: true once the run was aborted (add it to your own). */
    this.stopCondition = () => this.aborted !== undefined;
    const own = stopWhen === undefined ? [({ steps }) => steps.length === 1] : Array.isArray(stopWhen) ? stopWhen : [stopWhen];
    this.stopWhen = [...own, this.stopCondition];
    this.toolApproval = (options) => this._approve(options);
    this.onEnd = async (event) => {
      await this.end();
      await this._userOnEnd?.(event);
    };
    /** What to spread into generateText / streamText. */
    this.settings = { tools: this.tools, toolApproval: this.toolApproval, stopWhen: this.stopWhen, onEnd: this.onEnd };
  }

  /** The run is over: a `run_end` (a call through this object after it starts a new run). */
  async end() {
    if (this._ended) return;
    this._ended = true;
    try {
      await this.guard.post("/v1/events", await this._event("run_end", this.runId, "end"));
    } catch (error) {
      this.guard.fail(error, false);
    }
  }

  /** After `end()`, a call starts the run anew under a new id (an ended run's events are not
   * applied again at the gateway). */
  _reopen() {
    if (!this._ended) return;
    this._ended = false;
    this._generation += 1;
    this.runId = this._givenId === undefined ? `ai-sdk-${globalThis.crypto.randomUUID()}` : `${this._givenId}.${this._generation}`;
    this.aborted = undefined;
    this._seen.clear();
  }

  /** An event of run `runId`; its id is the run's and `key`'s. */
  async _event(type, runId, key, fields = {}) {
    const event = { type, event_id: await eventId(`${runId}:${key}`), run_id: runId, agent_id: this.guard.agentId };
    if (this.sessionId) event.session_id = this.sessionId;
    return { ...event, ...fields };
  }

  /** The call's loopwatch fields: the ids, the event id derived from the tool call id (a tool
   * call id the run saw before gets its number added: one event per call). */
  async _call(tool, params, toolCallId) {
    this._reopen();
    const seen = (this._seen.get(toolCallId) ?? 0) + 1;
    this._seen.set(toolCallId, seen);
    const key = seen === 1 ? toolCallId : `${toolCallId}#${seen}`;
    return { runId: this.runId, tool, params: params ?? {}, toolCallId, key };
  }

  async _decide(call) {
    if (this.aborted?.message !== undefined) {
      // an aborted run stays aborted: its later calls are refused here, also when the gateway
      // cannot be asked (an abort learned from a result has no words yet: the gateway's next
      // answer for the run gives them)
      return { action: "abort", text: this.aborted.message, reason: this.aborted.reason };
    }
    const body = {
      run_id: call.runId,
      agent_id: this.guard.agentId,
      tool: call.tool,
      params: call.params,
      tool_call_id: call.toolCallId,
      event_id: await eventId(`${call.runId}:${call.key}`),
    };
    if (this.sessionId) body.session_id = this.sessionId;
    if (this.parentRunId) body.parent_run_id = this.parentRunId;
    let answer;
    try {
      answer = await this.guard.post("/v1/decide", body);
      if (!DECISIONS.has(answer.decision)) {
        throw new Error(`${this.guard.gatewayUrl}/v1/decide answered no decision: ${jsonText(answer).slice(0, 200)}`);
      }
    } catch (error) {
      return this.guard.fail(error, true);
    }
    const given = ruling(answer);
    if (given.action === "abort") this.aborted = { reason: this.aborted?.reason ?? given.reason, message: given.text };
    return given;
  }

  /** Report what a call gave (`outcome`: {result} or {error}); an abort it caused ends the run. */
  async _report(call, outcome) {
    const fields = { tool: call.tool, params: call.params, tool_call_id: call.toolCallId, ...outcome };
    let answer;
    try {
      answer = await this.guard.post("/v1/events", await this._event("tool_result", call.runId, `${call.key}:result`, fields));
    } catch (error) {
      this.guard.fail(error, false); // (the tool ran: nothing is left to refuse)
      return;
    }
    const abort = abortIn(answer.outputs);
    if (abort) this.aborted ??= { reason: typeof abort.reason === "string" ? abort.reason : undefined, message: undefined };
  }

  /** The generic `toolApproval`: loopwatch's decision, then the caller's own approval. */
  async _approve(options) {
    const toolCall = options?.toolCall ?? {};
    const name = toolCall.toolName;
    if (this._guarded.has(name) && !toolCall.providerExecuted) {
      const call = await this._call(name, toolCall.input, toolCall.toolCallId);
      const given = await this._decide(call);
      if (given.action === "block" || given.action === "abort") return { type: "denied", reason: given.text };
      this._pending.set(call.toolCallId, { call, ruling: given });
    }
    return this._theirs(options);
  }

  /** The caller's own `toolApproval` (a function for every call, or one per tool). */
  async _theirs(options) {
    const theirs = this._userApproval;
    if (theirs == null) return undefined;
    if (typeof theirs === "function") return theirs(options);
    const { toolCall, toolsContext, runtimeContext, messages } = options;
    const own = Object.hasOwn(theirs, toolCall.toolName) ? theirs[toolCall.toolName] : undefined;
    if (typeof own !== "function") return own;
    return own(toolCall.input, {
      toolCallId: toolCall.toolCallId,
      messages,
      toolContext: toolsContext && Object.hasOwn(toolsContext, toolCall.toolName) ? toolsContext[toolCall.toolName] : undefined,
      runtimeContext,
    });
  }

  /** The decision made for a call at its approval, or one asked now. */
  async _rulingFor(name, input, toolCallId) {
    const pending = this._pending.get(toolCallId);
    if (pending && pending.call.tool === name) {
      this._pending.delete(toolCallId);
      return pending;
    }
    const call = await this._call(name, input, toolCallId);
    return { call, ruling: await this._decide(call) };
  }

  _wrapTools(tools) {
    this._guarded = new Set();
    const wrapped = {};
    for (const [name, tool] of Object.entries(tools)) {
      if (!tool || typeof tool.execute !== "function" || tool.type === "provider") {
        wrapped[name] = tool; // provider-executed and client-side tools: not run here
        continue;
      }
      this._guarded.add(name);
      wrapped[name] = this._wrapTool(name, tool);
    }
    return wrapped;
  }

  _wrapTool(name, tool) {
    const run = this;
    const execute = tool.execute;
    const ownModelOutput = typeof tool.toModelOutput === "function" ? tool.toModelOutput : undefined;

    /** The output the tool gave, as the model will read it: a warning appended to a string;
     * any other output (or a tool with its own toModelOutput) gets it in toModelOutput. */
    const noted = (output, toolCallId, given) => {
      if (given.action !== "warn" || !given.text) return output;
      if (typeof output === "string" && !ownModelOutput) return output ? `${output}\n\n${given.text}` : given.text;
      run._notes.set(toolCallId, given.text);
      return output;
    };

    let guarded;
    if (isAsyncGeneratorFunction(execute)) {
      // a streaming tool: its outputs pass as they come (preliminary results); the last is its
      // result, held back until the tool ends so that it carries the warning
      guarded = async function* (input, options) {
        const { call, ruling: given } = await run._rulingFor(name, input, options?.toolCallId);
        if (given.action === "block" || given.action === "abort") {
          yield given.text;
          return;
        }
        let held;
        let has = false;
        try {
          // each step of the tool runs as the run's (a run it starts is a subagent)
          const outputs = callingRun.run(run.runId, () => execute.call(this, input, options)[Symbol.asyncIterator]());
          for (;;) {
            const step = await callingRun.run(run.runId, () => outputs.next());
            if (step.done) break;
            if (has) yield held;
            held = step.value;
            has = true;
          }
        } catch (error) {
          await run._report(call, { error: errorText(error) });
          throw notedError(error, given);
        }
        await run._report(call, { result: held ?? null });
        yield noted(held, call.toolCallId, given);
      };
    } else {
      guarded = async function (input, options) {
        const { call, ruling: given } = await run._rulingFor(name, input, options?.toolCallId);
        if (given.action === "block" || given.action === "abort") return given.text;
        let output;
        try {
          output = await callingRun.run(run.runId, () => execute.call(this, input, options));
          if (isAsyncIterable(output)) {
            let last;
            for await (const part of output) last = part; // (the SDK takes the last as the result)
            output = last;
          }
        } catch (error) {
          await run._report(call, { error: errorText(error) });
          throw notedError(error, given);
        }
        await run._report(call, { result: output ?? null });
        return noted(output, call.toolCallId, given);
      };
    }

    const toModelOutput = async (options) => {
      const base = ownModelOutput ? await ownModelOutput(options) : defaultModelOutput(options.output);
      const note = run._notes.get(options.toolCallId);
      return note ? withNote(base, note) : base;
    };

    // a copy with every own property of the tool (non-enumerable ones too, as the SDK's
    // experimental_toolCaller), its execute and toModelOutput replaced
    const copy = Object.create(Object.getPrototypeOf(tool), Object.getOwnPropertyDescriptors(tool));
    for (const [key, value] of Object.entries({ execute: guarded, toModelOutput })) {
      Object.defineProperty(copy, key, { value, enumerable: true, writable: true, configurable: true });
    }
    return copy;
  }
}
