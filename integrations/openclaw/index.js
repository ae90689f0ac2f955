// loopwatch for OpenClaw: before every tool call, ask a loopwatch gateway (POST /v1/decide);
// after it, report the result (POST /v1/events). A block or an abort refuses the call with the
// verdict's message, unchanged (OpenClaw's own sentences); a warning lets the call run and, as
// OpenClaw 2026.9 does, appends a system note to the warned call's result. When the gateway is
// unreachable or slower than timeoutMs, the call runs (failOpen, the default) or is refused
// (failOpen: false) — except in a run the gateway aborted: that run's later calls are refused
// here, with the abort's message, until the run ends (agent_end → run_end).
//
// What the shipped OpenClaw (2026.9.6) plugin API gives, and what each part uses (see README):
// * before_tool_call (modifying; {block, blockReason}) → /v1/decide;
// * after_tool_call (observe only; its return value is ignored) → a tool_result event;
// * api.registerAgentToolResultMiddleware (needs contracts.agentToolResultMiddleware in the
//   manifest and an explicitly enabled plugin) → the warning note, in the result the model
//   reads and the transcript keeps;
// * api.runtime.events.onSessionTranscriptUpdate → each model turn's usage (the assistant
//   message is written before its tool calls run) → `usage` on the turn's first /v1/decide;
// * agent_end (a conversation hook: needs plugins.entries.loopwatch.hooks.allowConversationAccess)
//   → a run_end event;
// * subagent_spawned → the child run's chain (parent_run_id, root_run_id, depth) on its first
//   /v1/decide (delegation chains, BEYOND-OPENCLAW F6); subagent_ended → the child's run_end.

import { randomUUID } from "node:crypto";

// abortMemoryMs: how long an abort is kept here; loopwatch's gateway forgets a run idle for
// LOOPWATCH_STATE_TTL_S (3600 s by default), and calls refused here do not reach it
const DEFAULTS = {
  gatewayUrl: "http://127.0.0.1:6070",
  timeoutMs: 200,
  failOpen: true,
  abortMemoryMs: 3_600_000,
  abortStopsRun: false,
};

/** OpenClaw's way to stop a session's active embedded run (`abortAgentHarnessRun` of
 * openclaw/plugin-sdk/agent-harness: the run ends after the current tool batch, as with /stop),
 * or null where this OpenClaw has none (the call is then only refused, and the later ones). */
let runAborter;
let aborterMissingTold = false;
function loadRunAborter() {
  runAborter ??= import("openclaw/plugin-sdk/agent-harness").then(
    (sdk) => (typeof sdk.abortAgentHarnessRun === "function" ? sdk.abortAgentHarnessRun : null),
    () => null,
  );
  return runAborter;
}

/** Stop the run of a hook's ctx (its session's active run: the hook runs inside it). Never
 * without a session id: OpenClaw's function stops every active run when given none. */
async function stopRun(cfg, ctx, logger) {
  const sessionId = text(ctx?.sessionId);
  if (!cfg.abortStopsRun || !sessionId) return;
  const abort = await loadRunAborter();
  if (!abort) {
    if (!aborterMissingTold) {
      aborterMissingTold = true;
      logger?.warn?.(
        "loopwatch: abortStopsRun is set, but this OpenClaw has no abortAgentHarnessRun " +
          "(openclaw/plugin-sdk/agent-harness): an aborted run's calls are refused one by one instead",
      );
    }
    return;
  }
  // after this hook's refusal is in the run (and its transcript): stopped at once, the run
  // kept neither the aborted call nor the refusal that says why
  setTimeout(() => {
    try {
      abort(sessionId);
    } catch (error) {
      logger?.warn?.(`loopwatch: the aborted run was not stopped: ${error.message}`);
    }
  }, 0);
}

/** OpenClaw's own limit on a before_tool_call handler when neither the plugin nor the operator
 * sets one (hooks-*.mjs, DEFAULT_MODIFYING_HOOK_TIMEOUT_MS_BY_HOOK). On expiry OpenClaw refuses
 * the call ("Tool call blocked because before_tool_call hook failed"), whatever failOpen says. */
export const OPENCLAW_HOOK_TIMEOUT_MS = 15_000;

/** The limit the plugin asks OpenClaw for on its before_tool_call handler: above timeoutMs, so
 * that a gateway slower than timeoutMs meets loopwatch's failOpen, not OpenClaw's refusal (an
 * operator's plugins.entries.loopwatch.hooks.timeoutMs, if set, still wins). */
export function hookTimeoutMs(cfg) {
  const own = Number(cfg.timeoutMs);
  if (!Number.isFinite(own)) return OPENCLAW_HOOK_TIMEOUT_MS;
  // at most setTimeout's largest delay: beyond it Node fires the timer after 1 ms, and OpenClaw
  // would refuse every call at once
  return Math.min(MAX_TIMER_MS, Math.max(OPENCLAW_HOOK_TIMEOUT_MS, Math.ceil(own) + 5_000));
}

/** The longest delay setTimeout takes (a 32-bit signed integer of milliseconds). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Runs remembered (aborted, pending usage, calls), and subagents' chains; the oldest is
 * forgotten beyond this. */
export const MAX_RUNS = 10_000;
/** How long a subagent's first call waits for OpenClaw's subagent_spawned, which OpenClaw runs
 * once the child's run was launched: a child quick to call a tool may ask first. */
export const CHAIN_WAIT_MS = 2_000;
/** Calls remembered per run (their scope, params and warning, until their result). */
export const MAX_CALLS_PER_RUN = 1_000;

/** OpenClaw 2026.9's note (packages/agent-core/src/internal-hooks.ts, appendToolLoopWarning). */
export function loopWarningNote(count) {
  return `[System note: Tool-loop warning after ${count} repeated calls. Change your approach or stop if you are not making progress.]`;
}
const NOTE = /^\[System note: Tool-loop warning after \d+ repeated calls\. Change your approach or stop if you are not making progress\.\]$/;
const NOTE_START = "\n[System note: Tool-loop warning after ";

/** Where a note appended to `text` begins (its newline), or -1. A search from the end: an
 * end-anchored regex scans the whole text each time, and a result ending in many notes took
 * time quadratic in its size. */
function noteSuffixAt(text) {
  const at = text.lastIndexOf(NOTE_START);
  return at >= 0 && NOTE.test(text.slice(at + 1)) ? at : -1;
}

/** The plugin's settings over its defaults; `problems` lists each option given a value of the
 * wrong kind, and what was taken instead (logged once at start: a string "false" for failOpen
 * was true, and a bad timeoutMs failed every call). */
export function settings(config) {
  const merged = { ...DEFAULTS, ...(config ?? {}) };
  const problems = [];
  for (const key of ["failOpen", "abortStopsRun"]) {
    const given = merged[key];
    if (typeof given === "boolean") continue;
    const word = typeof given === "string" ? given.trim().toLowerCase() : undefined;
    merged[key] = word === "true" || word === "false" ? word === "true" : DEFAULTS[key];
    problems.push(`${key} must be true or false, not ${JSON.stringify(given)} (taken as ${merged[key]})`);
  }
  for (const key of ["timeoutMs", "abortMemoryMs"]) {
    const given = merged[key];
    if (typeof given === "number" && Number.isFinite(given) && given > 0) continue;
    const number = typeof given === "string" && given.trim() !== "" ? Number(given) : NaN;
    merged[key] = Number.isFinite(number) && number > 0 ? number : DEFAULTS[key];
    problems.push(`${key} must be a number of milliseconds above 0, not ${JSON.stringify(given)} (taken as ${merged[key]})`);
  }
  let url = String(merged.gatewayUrl);
  while (url.endsWith("/")) url = url.slice(0, -1); // (a /\/+$/ regex is quadratic in the slashes)
  merged.gatewayUrl = url;
  if (!/^https?:\/\/[^/]/i.test(url)) {
    problems.push(`gatewayUrl ${JSON.stringify(url)} is no http:// or https:// URL: no call can be checked`);
  }
  merged.problems = problems;
  return merged;
}

/** JSON of a value a tool may give: a BigInt as its digits, a value that contains itself as
 * "[Circular]" (JSON.stringify throws on both, and the call's outcome went unreported). */
export function jsonText(value) {
  const open = [];
  return JSON.stringify(value, function (key, item) {
    if (typeof item === "bigint") return item.toString();
    // OpenClaw's stableStringify writes Infinity, -Infinity and NaN as these strings: hashed alike
    if (typeof item === "number" && !Number.isFinite(item)) return String(item);
    if (item === null || typeof item !== "object") return item;
    while (open.length && open.at(-1) !== this) open.pop(); // back out of finished objects
    if (open.includes(item)) return "[Circular]";
    open.push(item);
    return item;
  });
}

/** Why a request failed, in a few words: no answer in time, or the network's own cause
 * (ECONNREFUSED, ENOTFOUND, an invalid URL), not fetch's bare "fetch failed". */
function failure(error, cfg) {
  if (error?.name === "TimeoutError" || error?.name === "AbortError") return `no answer within ${cfg.timeoutMs} ms`;
  const cause = error?.cause;
  return String(cause?.code ?? cause?.message ?? error?.message ?? error);
}

async function post(cfg, path, body) {
  const where = cfg.gatewayUrl + path;
  // OpenClaw's own sentences in the answers (other clients are told in loopwatch's words)
  const headers = { "content-type": "application/json", "x-loopwatch-texts": "openclaw" };
  if (cfg.token) headers.authorization = `Bearer ${cfg.token}`;
  let answer;
  try {
    answer = await fetch(where, {
      method: "POST",
      headers,
      body: jsonText(body),
      signal: AbortSignal.timeout(cfg.timeoutMs),
    });
  } catch (error) {
    throw new Error(`${where}: ${failure(error, cfg)}`);
  }
  let data;
  try {
    data = await answer.json();
  } catch (error) {
    if (error?.name === "TimeoutError" || error?.name === "AbortError") {
      throw new Error(`${where}: no whole answer within ${cfg.timeoutMs} ms`);
    }
    data = undefined; // not JSON
  }
  const object = data !== null && typeof data === "object" && !Array.isArray(data);
  if (!answer.ok) {
    const said = object && typeof data.error === "string" ? `: ${data.error}` : "";
    throw new Error(`${where} answered ${answer.status}${said}`);
  }
  // a URL that answers something other than a gateway's JSON is unreachable, as failOpen says
  if (!object) throw new Error(`${where} answered no JSON object`);
  return data;
}

const DECISIONS = new Set(["allow", "warn", "block", "abort"]);

function text(value) {
  return typeof value === "string" && value.trim() ? value.trim() : undefined;
}

/** The agent of a session key `agent:<agentId>:<rest>`. */
function agentOfSessionKey(sessionKey) {
  const found = /^agent:([^:]+):/.exec(sessionKey ?? "");
  return found ? found[1] : undefined;
}

/**
 * The loopwatch run of a hook's event and context, the same for every hook of one run:
 * run_id = OpenClaw's runId (event, then ctx), else the session key (a call with no run, as
 * the Gateway's /tools/invoke makes); session_id = OpenClaw's sessionId, the id of the
 * session's transcript (what `loopwatch import` names session_id); agent_id = ctx.agentId,
 * else the session key's agent, else "main". `key` is loopwatch's own run scope (run_id, else
 * `session:<session_id>`). Null when nothing names a run: there is no run to keep.
 */
export function runScope(event, ctx) {
  const sessionKey = text(ctx?.sessionKey) ?? text(event?.sessionKey);
  const runId = text(event?.runId) ?? text(ctx?.runId) ?? sessionKey;
  const sessionId = text(ctx?.sessionId) ?? text(event?.sessionId);
  if (!runId && !sessionId) return null;
  const fields = { agent_id: text(ctx?.agentId) ?? agentOfSessionKey(sessionKey) ?? "main" };
  if (runId) fields.run_id = runId;
  if (sessionId) fields.session_id = sessionId;
  return { key: runId ?? `session:${sessionId}`, fields };
}

/** A Map that forgets its oldest entries beyond `limit` (a touched entry becomes the newest). */
class Recent {
  constructor(limit) {
    this.limit = limit;
    this.map = new Map();
  }
  get(key) {
    return this.map.get(key);
  }
  touch(key, make) {
    let value = this.map.get(key);
    if (value === undefined) value = make();
    else this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.limit) this.map.delete(this.map.keys().next().value);
    return value;
  }
  set(key, value) {
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.limit) this.map.delete(this.map.keys().next().value);
  }
  delete(key) {
    return this.map.delete(key);
  }
  get size() {
    return this.map.size;
  }
}

/** What the plugin remembers: per run {aborted?: message, abortedAt, usage?, calls: Recent,
 * chainSent?}; per session key the run last seen in it and that run's chain (a subagent's
 * spawn names its parent by session key); per child (`run:<runId>`, `session:<key>`) the chain
 * its subagent_spawned gave; the calls waiting for a child's chain. */
export function createState(maxRuns = MAX_RUNS) {
  return { runs: new Recent(maxRuns), sessions: new Recent(maxRuns), chains: new Recent(maxRuns), waiting: new Map() };
}

/** Whether a session key is a subagent's (`agent:<id>:subagent:<uuid>`, as OpenClaw's
 * isSubagentSessionKey says). */
export function isSubagentSessionKey(sessionKey) {
  const key = text(sessionKey)?.toLowerCase();
  if (!key) return false;
  if (key.startsWith("subagent:")) return true;
  const parts = key.split(":");
  return parts[0] === "agent" && parts.length > 3 && parts[2] === "subagent";
}

/** The chain of a child run: its parent's run, the parent's root (the parent itself when it is a
 * root), one level deeper than the parent (F6: a root is at depth 0). */
export function childChain(parent) {
  return {
    parent_run_id: parent.runId,
    root_run_id: parent.chain?.root_run_id ?? parent.runId,
    depth: (parent.chain?.depth ?? 0) + 1,
  };
}

function chainOf(state, scope, sessionKey) {
  return (
    (scope.fields.run_id ? state.chains.get(`run:${scope.fields.run_id}`) : undefined) ??
    (sessionKey ? state.chains.get(`session:${sessionKey}`)?.chain : undefined)
  );
}

/** The chain of a subagent's run, waiting (at most `ms`) for its subagent_spawned. */
function awaitChain(state, scope, sessionKey, ms) {
  const found = chainOf(state, scope, sessionKey);
  if (found || !isSubagentSessionKey(sessionKey)) return Promise.resolve(found);
  return new Promise((resolve) => {
    const waiters = state.waiting.get(sessionKey) ?? new Set();
    state.waiting.set(sessionKey, waiters);
    const done = () => {
      clearTimeout(timer);
      waiters.delete(done);
      if (!waiters.size) state.waiting.delete(sessionKey);
      resolve(chainOf(state, scope, sessionKey));
    };
    const timer = setTimeout(done, ms);
    waiters.add(done);
  });
}

function runOf(state, key) {
  return state.runs.touch(key, () => ({
    aborted: undefined,
    abortedAt: 0,
    usage: undefined,
    calls: new Recent(MAX_CALLS_PER_RUN),
  }));
}

function number(value) {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? value : 0;
}

/** loopwatch's usage of an OpenClaw assistant message's usage (pi-ai's Usage), or undefined. */
export function usageOf(usage) {
  if (!usage || typeof usage !== "object") return undefined;
  const input = Math.floor(number(usage.input) + number(usage.cacheRead) + number(usage.cacheWrite));
  const output = Math.floor(number(usage.output));
  const cost = number(typeof usage.cost === "object" ? usage.cost?.total : usage.cost);
  if (!input && !output && !cost) return undefined;
  return { input_tokens: input, output_tokens: output, cost_usd: cost };
}

/** The result without the tool-loop notes appended to it (ours or OpenClaw's own). */
export function withoutLoopNotes(result) {
  if (!result || typeof result !== "object" || !Array.isArray(result.content)) return result;
  const content = [...result.content];
  let changed = false;
  let at = -1;
  for (;;) {
    const last = content.at(-1);
    if (!last || last.type !== "text" || typeof last.text !== "string") break;
    if (NOTE.test(last.text)) {
      content.pop();
    } else if ((at = noteSuffixAt(last.text)) >= 0) {
      content[content.length - 1] = { ...last, text: last.text.slice(0, at) };
    } else {
      break;
    }
    changed = true;
  }
  return changed ? { ...result, content } : result;
}

function eventId(kind) {
  return `openclaw-plugin-${kind}-${randomUUID()}`;
}

function remember(run, message) {
  run.aborted = String(message ?? "");
  run.abortedAt = Date.now();
}

function abortIn(outputs) {
  return (outputs ?? []).find((out) => out?.type === "abort" && out.enforced !== false);
}

export function createHooks(config, logger, state = createState()) {
  const cfg = settings(config);
  // (a state made by an older copy of this module, still on globalThis)
  state.sessions ??= new Recent(state.runs.limit);
  state.chains ??= new Recent(state.runs.limit);
  state.waiting ??= new Map();
  for (const problem of cfg.problems) logger?.warn?.(`loopwatch: ${problem}`);
  const unscoped = { warned: false };

  return {
    state,

    async beforeToolCall(event, ctx) {
      const scope = runScope(event, ctx);
      if (!scope) {
        if (!unscoped.warned) logger?.warn?.("loopwatch: a tool call with no run id, session key or session id is not checked");
        unscoped.warned = true;
        return undefined;
      }
      const run = runOf(state, scope.key);
      const toolCallId = text(event?.toolCallId) ?? text(ctx?.toolCallId);
      const refuse = (message) => {
        // OpenClaw reports a refused call's outcome (after_tool_call with the refusal as its
        // error): the call never ran, so loopwatch (which recorded the veto) is not told
        if (toolCallId) run.calls.set(toolCallId, { refused: true });
        return { block: true, blockReason: message };
      };
      if (run.aborted !== undefined) {
        if (Date.now() - run.abortedAt < cfg.abortMemoryMs) {
          await stopRun(cfg, ctx, logger); // (an abort learned with a tool result: stopped here, inside the run)
          return refuse(run.aborted);
        }
        run.aborted = undefined; // kept long enough: the gateway is asked again
      }
      const params = event?.params ?? {};
      // a subagent's run: its chain goes with its first call that reaches the gateway (the
      // chain of a run is fixed by its first event; later ones would be ignored)
      const sessionKey = text(ctx?.sessionKey) ?? text(event?.sessionKey);
      if (!run.chainSent) {
        // (waited for once per run: a child whose spawn never comes is a root)
        run.chain = run.chainWaited ? chainOf(state, scope, sessionKey) : await awaitChain(state, scope, sessionKey, CHAIN_WAIT_MS);
        run.chainWaited = true;
      }
      const chain = run.chain;
      if (sessionKey) state.sessions.set(sessionKey, { runId: scope.fields.run_id ?? scope.key, fields: scope.fields, chain });
      const usage = run.usage;
      run.usage = undefined; // the turn's first call carries it
      const body = { ...scope.fields, tool: event?.toolName, params, tool_call_id: toolCallId };
      if (usage) body.usage = usage;
      if (chain && !run.chainSent) Object.assign(body, chain);
      let answer;
      try {
        answer = await post(cfg, "/v1/decide", body);
        if (!DECISIONS.has(answer.decision)) {
          const given = answer.decision === undefined ? "none" : JSON.stringify(answer.decision);
          throw new Error(`${cfg.gatewayUrl}/v1/decide answered no decision (${given})`);
        }
        run.chainSent = true;
      } catch (error) {
        if (usage && run.usage === undefined) run.usage = usage; // not delivered: the next call
        logger?.warn?.(`loopwatch: ${error.message}; ${cfg.failOpen ? "allowing" : "refusing"} the call`);
        return cfg.failOpen ? undefined : refuse(`loopwatch could not check this call, so it was not run: ${error.message}`);
      }
      const call = { fields: scope.fields, tool: event?.toolName, params, warnCount: undefined };
      const reason = typeof answer.message === "string" ? answer.message : `loopwatch: ${answer.decision}`;
      if (answer.decision === "abort") {
        remember(run, reason);
        await stopRun(cfg, ctx, logger);
        return refuse(reason);
      }
      if (answer.decision === "block") return refuse(reason);
      if (answer.decision === "warn") {
        const verdicts = Array.isArray(answer.verdicts) ? answer.verdicts : [];
        const verdict = verdicts.find((v) => v?.type === "verdict" && v.action === "warn");
        call.warnCount = Number.isInteger(verdict?.count) ? verdict.count : undefined;
      }
      if (toolCallId) run.calls.set(toolCallId, call);
      return undefined;
    },

    /** Agent tool-result middleware: the warned call's result gets OpenClaw's note. */
    async toolResultMiddleware(event, ctx) {
      const scope = runScope(event, ctx);
      const toolCallId = text(event?.toolCallId);
      if (!scope || !toolCallId) return undefined;
      const call = state.runs.get(scope.key)?.calls.get(toolCallId);
      if (call?.warnCount === undefined || call.noted) return undefined;
      call.noted = true;
      const result = event.result ?? {};
      const content = Array.isArray(result.content) ? result.content : [];
      return { result: { ...result, content: [...content, { type: "text", text: loopWarningNote(call.warnCount) }] } };
    },

    async afterToolCall(event, ctx) {
      const scope = runScope(event, ctx);
      if (!scope) return;
      const toolCallId = text(event?.toolCallId) ?? text(ctx?.toolCallId);
      const run = state.runs.get(scope.key);
      const call = toolCallId ? run?.calls.get(toolCallId) : undefined;
      if (call) run.calls.delete(toolCallId);
      if (call?.refused) return;
      const failed = event?.error !== undefined && event?.error !== null;
      const outcome = failed ? { error: String(event.error) } : { result: withoutLoopNotes(event?.result ?? null) };
      try {
        const answer = await post(cfg, "/v1/events", {
          type: "tool_result",
          event_id: eventId("result"),
          ...(call?.fields ?? scope.fields),
          tool: call?.tool ?? event?.toolName,
          params: call?.params ?? event?.params ?? {},
          tool_call_id: toolCallId,
          ...outcome,
        });
        const abort = abortIn(answer?.outputs);
        if (abort) remember(runOf(state, scope.key), abort.message);
      } catch (error) {
        logger?.warn?.(`loopwatch: result not reported: ${error.message}`);
      }
    },

    /** A model turn's usage (an assistant message written to the transcript). */
    noteTurnUsage(update) {
      const message = update?.message;
      if (!message || message.role !== "assistant" || message.provider === "openclaw") return;
      const usage = usageOf(message.usage);
      if (!usage) return;
      const runId = text(message.__openclaw?.runId) ?? text(update.runId);
      const scope = runScope({ runId }, { sessionKey: update.sessionKey, sessionId: update.sessionId, agentId: update.agentId });
      if (!scope) return;
      const run = runOf(state, scope.key);
      run.usage = run.usage
        ? {
            input_tokens: run.usage.input_tokens + usage.input_tokens,
            output_tokens: run.usage.output_tokens + usage.output_tokens,
            cost_usd: run.usage.cost_usd + usage.cost_usd,
          }
        : usage;
    },

    async agentEnd(event, ctx) {
      const scope = runScope(event, ctx);
      if (!scope) return;
      state.runs.delete(scope.key);
      try {
        await post(cfg, "/v1/events", { type: "run_end", event_id: eventId("end"), ...scope.fields });
      } catch (error) {
        logger?.warn?.(`loopwatch: run end not reported: ${error.message}`);
      }
    },

    /** OpenClaw started a subagent (sessions_spawn, inside a call of the parent's run): the
     * child's run is a link of the parent's chain. The parent is named by its session key
     * (ctx.requesterSessionKey): its run is the one last seen calling a tool there. */
    subagentSpawned(event, ctx) {
      const childRunId = text(event?.runId) ?? text(ctx?.runId);
      const childSessionKey = text(event?.childSessionKey) ?? text(ctx?.childSessionKey);
      const parent = state.sessions.get(text(ctx?.requesterSessionKey) ?? "");
      if (!parent || (!childRunId && !childSessionKey)) {
        logger?.warn?.(
          `loopwatch: subagent ${childRunId ?? childSessionKey ?? "?"} of a session with no run seen here: it is a chain's root`,
        );
        return;
      }
      const chain = childChain(parent);
      if (childRunId) state.chains.set(`run:${childRunId}`, chain);
      if (childSessionKey) {
        state.chains.set(`session:${childSessionKey}`, { chain, runId: childRunId, agentId: text(event?.agentId) });
        for (const done of [...(state.waiting.get(childSessionKey) ?? [])]) done();
      }
    },

    /** A subagent ended: its run ends (a run_end for the run its calls named, else the spawned
     * run id), and the plugin forgets it. */
    async subagentEnded(event, ctx) {
      const sessionKey = text(event?.targetSessionKey) ?? text(ctx?.childSessionKey);
      const runId = text(event?.runId) ?? text(ctx?.runId);
      const seen = sessionKey ? state.sessions.get(sessionKey) : undefined;
      const spawned = sessionKey ? state.chains.get(`session:${sessionKey}`) : undefined;
      const ended = new Map();
      if (seen) ended.set(seen.runId, seen.fields);
      if (runId && !ended.has(runId)) {
        const agentId = spawned?.agentId ?? seen?.fields.agent_id ?? agentOfSessionKey(sessionKey) ?? "main";
        ended.set(runId, { agent_id: agentId, run_id: runId });
      }
      if (runId) state.chains.delete(`run:${runId}`);
      if (sessionKey) {
        state.chains.delete(`session:${sessionKey}`);
        state.sessions.delete(sessionKey);
      }
      for (const [key, fields] of ended) {
        state.runs.delete(key);
        try {
          await post(cfg, "/v1/events", { type: "run_end", event_id: eventId("end"), ...fields });
        } catch (error) {
          logger?.warn?.(`loopwatch: subagent run end not reported: ${error.message}`);
        }
      }
    },
  };
}

// One state per process, whatever registers the plugin: OpenClaw loads this module more than
// once (a full registry, discovery snapshots, each with its own module instance) and may run
// before_tool_call from one instance and the tool-result middleware from another. So the
// state, and the one transcript listener, live on globalThis.
const GLOBAL = Symbol.for("loopwatch.openclaw-plugin");
globalThis[GLOBAL] ??= { state: createState(), unsubscribe: undefined };
const shared = globalThis[GLOBAL];

export default {
  id: "loopwatch",
  name: "loopwatch",
  description: "Fleet-wide tool-loop detection: asks a loopwatch gateway before every tool call.",
  register(api) {
    const hooks = createHooks(api.pluginConfig ?? {}, api.logger, shared.state);
    api.on("before_tool_call", hooks.beforeToolCall, { timeoutMs: hookTimeoutMs(settings(api.pluginConfig)) });
    api.on("after_tool_call", hooks.afterToolCall);
    api.on("agent_end", hooks.agentEnd);
    api.on("subagent_spawned", hooks.subagentSpawned);
    api.on("subagent_ended", hooks.subagentEnded);
    api.registerAgentToolResultMiddleware?.(hooks.toolResultMiddleware, { runtimes: ["openclaw"] });
    // the runtime is live only in full loads (cli-metadata and setup-only loads throw on it)
    if (api.registrationMode !== undefined && api.registrationMode !== "full") return;
    try {
      const subscribe = api.runtime?.events?.onSessionTranscriptUpdate;
      if (typeof subscribe === "function") {
        shared.unsubscribe?.();
        shared.unsubscribe = subscribe((update) => hooks.noteTurnUsage(update));
      }
    } catch (error) {
      api.logger?.warn?.(`loopwatch: no model usage (transcript updates unavailable: ${error.message})`);
    }
  },
};
