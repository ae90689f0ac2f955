// loopwatch dashboard: polls the JSON routes once a second and redraws. No dependencies.
// Every text that comes from agents (run ids, tool names, messages) is set as textContent.
"use strict";
(() => {
  const POLL_MS = 1000;
  const main = document.getElementById("main");
  const status = document.getElementById("status");
  const minutes = document.getElementById("minutes");
  const ACTIONS = ["warn", "block", "abort"];
  let generation = 0;
  let timer = null;

  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined) continue;
      if (key === "class") node.className = value;
      else if (key === "style") node.style.cssText = value;
      else node.setAttribute(key, value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const pad = (n) => String(n).padStart(2, "0");
  function time(ms) {
    const d = new Date(ms);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  const num = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : String(n ?? "–"));
  const sum = (values) => values.reduce((a, b) => a + b, 0);
  const badge = (kind, text) => h("span", { class: `badge ${kind}` }, text ?? kind);
  const runLink = (run) => h("a", { href: `#/run/${encodeURIComponent(run)}`, title: run, "data-run-link": run }, run);
  const chainLink = (root, text) =>
    h("a", { href: `#/chain/${encodeURIComponent(root)}`, title: `delegation chain of ${root}`, "data-chain-link": root }, text ?? root);

  function fingerprint(fp) {
    if (!fp) return "";
    const hue = parseInt(fp.replace(/[^0-9a-f]/gi, "").slice(0, 6) || "0", 16) % 360;
    return h("span", { class: "fp", title: "arguments fingerprint", style: `background:hsl(${hue},65%,68%)` }, fp);
  }

  function kpi(key, label, value, kind) {
    return h("div", { class: `kpi ${kind || ""}` },
      h("div", { class: "value", "data-kpi": key }, num(value)),
      h("div", { class: "label" }, label));
  }

  function table(id, headers, rows, empty) {
    if (!rows.length) return h("div", { class: "empty", id }, empty);
    return h("table", { id },
      h("thead", {}, h("tr", {}, headers.map(([text, cls]) => h("th", { class: cls }, text)))),
      h("tbody", {}, rows));
  }

  function panel(title, ...body) {
    return h("section", { class: "panel" }, h("h2", {}, title), ...body);
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function timeline(windows) {
    const width = 600, height = 70, step = width / Math.max(1, windows.length);
    const top = Math.max(1, ...windows.map((w) => w.events));
    const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", id: "timeline" });
    windows.forEach((w, i) => {
      const x = i * step + 1, barHeight = (w.events / top) * (height - 6);
      const group = svg("g", {});
      group.append(svg("title", {}, `${time(w.start_ms)}: ${w.events} events, ${w.warn} warn, ${w.block} block, ${w.abort} abort`));
      group.append(svg("rect", { x, y: height - barHeight, width: step - 2, height: barHeight, fill: "#5aa9e6", opacity: "0.6" }));
      if (w.warn + w.block + w.abort) {
        const color = w.abort ? "#e5484d" : w.block ? "#f0703c" : "#e5b22e";
        group.append(svg("rect", { x, y: 0, width: step - 2, height: 4, fill: color }));
      }
      root.append(group);
    });
    return h("div", { class: "timeline" }, root,
      h("div", { class: "legend" }, "events per minute, last 30 minutes; a cap marks minutes with verdicts:",
        h("i", { style: "background:var(--warn)" }), "warn", h("i", { style: "background:var(--block)" }), "block",
        h("i", { style: "background:var(--abort)" }), "abort"));
  }

  function breakdown(id, title, nested) {
    const rows = Object.entries(nested)
      .map(([name, counts]) => [name, counts, sum(ACTIONS.map((a) => counts[a] || 0))])
      .sort((a, b) => b[2] - a[2] || a[0].localeCompare(b[0]));
    const top = Math.max(1, ...rows.map((r) => r[2]));
    return panel(title, table(id, [["name"], ["warn", "num"], ["block", "num"], ["abort", "num"], [""]],
      rows.map(([name, counts, total]) => h("tr", { "data-name": name },
        h("td", { class: "run" }, name),
        ACTIONS.map((a) => h("td", { class: "num", "data-action": a }, num(counts[a] || 0))),
        h("td", {}, h("span", { class: "bar", style: `width:${Math.round((total / top) * 80)}px` })))),
      "no verdicts in this window"));
  }

  function renderFleet(data) {
    const verdicts = data.verdicts || {};
    const detectorRows = Object.entries(data.per_detector).sort((a, b) => b[1] - a[1]);
    main.replaceChildren(
      data.enabled ? "" : h("div", { class: "notice" }, "The fleet view is switched off on this worker (LOOPWATCH_FLEET_VIEW=false)."),
      h("div", { class: "kpis" },
        kpi("events_per_s", "events / s", Math.round(data.events_per_s * 10) / 10),
        kpi("events", `events, last ${data.minutes} min`, sum(Object.values(data.events))),
        kpi("active_runs", "active runs", data.active_runs),
        kpi("warn", "warnings", verdicts.warn || 0, "warn"),
        kpi("block", "blocks", verdicts.block || 0, "block"),
        kpi("abort", "aborts", verdicts.abort || 0, "abort")),
      alertPanels(data.alerts),
      h("div", { class: "panel", style: "margin-bottom:14px" }, timeline(data.timeline)),
      h("div", { class: "grid" },
        panel("Runs with verdicts",
          h("div", { class: "scroll" }, table("runs", [["run · agent"], ["status · worst"], ["warn", "num"], ["block", "num"], ["abort", "num"], ["last detector"], ["last seen"]],
            data.runs.map((r) => h("tr", { "data-run": r.run },
              h("td", { class: "run", title: r.run }, runLink(r.run), h("div", { class: "sub" }, r.agent_id)),
              h("td", {}, badge(r.status), " ", badge(r.worst)),
              ACTIONS.map((a) => h("td", { class: "num", "data-action": a }, num(r.verdicts[a] || 0))),
              h("td", { class: "det" }, (r.last_detector || "").replace(/_/g, "_\u200b")), h("td", { class: "mono" }, time(r.last_ms)))),
            "no run has a verdict yet"))),
        panel("Verdict feed",
          h("div", { class: "scroll" }, table("feed", [["time"], [""], ["run · agent"], ["tool · detector"], ["message"]],
            data.feed.map((v) => h("tr", { "data-verdict-id": v.verdict_id },
              h("td", { class: "mono" }, time(v.ts_ms)), h("td", {}, badge(v.action)),
              h("td", { class: "run" }, runLink(v.run), h("div", { class: "sub" }, v.agent_id)),
              h("td", {}, v.tool, h("div", { class: "sub" }, v.detector)), h("td", { class: "msg" }, v.message))),
            "no verdicts yet")))),
      h("div", { class: "grid3" },
        breakdown("by-agent", "By agent", data.per_agent),
        breakdown("by-tool", "By tool", data.per_tool),
        panel("By detector", table("by-detector", [["detector"], ["verdicts", "num"]],
          detectorRows.map(([name, n]) => h("tr", { "data-name": name }, h("td", {}, name), h("td", { class: "num" }, num(n)))),
          "no verdicts in this window"))),
      h("div", { class: "grid" },
        panel("Top looping tools (blocks and aborts)",
          h("div", { class: "chips", id: "looping-tools" },
            data.top_looping_tools.length ? data.top_looping_tools.map(([tool, n]) => h("span", { "data-name": tool }, `${tool} × ${n}`)) : h("div", { class: "empty" }, "none"))),
        panel("Tools failing across runs",
          h("div", { class: "chips", id: "failing-tools" },
            data.failing_tools.length ? data.failing_tools.map((tool) => h("span", { "data-name": tool }, tool)) : h("div", { class: "empty" }, "none")))),
      spendPanels(data.spend));
  }

  // fleet-wide rules: tools down for everybody, loops shared by many runs of one agent
  function sampleRuns(alert) {
    return h("div", { class: "sub" }, "runs: ", ...alert.sample_run_ids.flatMap((run, i) => [i ? ", " : "", runLink(run)]));
  }

  function alertPanels(alerts) {
    if (!alerts) return "";
    return h("div", { class: "grid", id: "fleet-alerts" },
      panel("Tool outages open now",
        table("outages", [["tool"], ["since"], ["runs", "num"], ["agents", "num"], ["message"]],
          alerts.open_outages.map((a) => h("tr", { "data-alert-id": a.alert_id, "data-tool": a.tool, class: "alert-row" },
            h("td", { class: "run" }, a.tool), h("td", { class: "mono" }, time(a.seen_ms ?? a.since_ts)),
            h("td", { class: "num" }, num(a.runs)), h("td", { class: "num" }, num(a.agents || 0)),
            h("td", { class: "msg" }, a.message, sampleRuns(a)))),
          "no tool is failing for the whole fleet")),
      panel("Systemic loops (last hour)",
        table("systemic", [["agent · tool"], ["detector"], ["runs", "num"], ["share", "num"], ["message"]],
          alerts.systemic_loops.map((a) => h("tr", { "data-alert-id": a.alert_id, "data-agent": a.agent_id, class: "alert-row" },
            h("td", { class: "run" }, a.agent_id, h("div", { class: "sub" }, a.tool)), h("td", { class: "det" }, a.detector),
            h("td", { class: "num" }, `${num(a.runs)} / ${num(a.active_runs)}`),
            h("td", { class: "num" }, `${Math.round(a.share * 100)}%`),
            h("td", { class: "msg" }, a.message, sampleRuns(a)))),
          "no loop is shared by many runs of one agent")),
      chainAlertPanel(alerts.chains || []));
  }

  // F6b / F6c: delegation chains that run away or whose runs repeat each other's work
  function chainAlertPanel(chains) {
    if (!chains.length) return "";
    return panel("Delegation chains (last hour)",
      table("chain-alerts", [["chain"], [""], ["runs", "num"], ["agents · calls", "num"], ["message"]],
        chains.map((a) => h("tr", { "data-alert-id": a.alert_id, "data-kind": a.kind, class: "alert-row" },
          h("td", { class: "run" }, a.chain_root === null ? a.subject : chainLink(a.chain_root),
            a.kind === "chain_repeat" ? h("div", { class: "sub" }, a.tool) : ""),
          h("td", {}, badge(a.kind === "chain_runaway" ? "block" : "warn", a.kind.replace("_", " "))),
          h("td", { class: "num" }, num(a.runs)),
          h("td", { class: "num" }, a.kind === "chain_repeat" ? `${num(a.count)} calls` : num(a.agents || 0)),
          h("td", { class: "msg" }, a.message, a.sample_run_ids?.length ? sampleRuns(a) : ""))),
        ""));
  }

  function usd(value) {
    return `$${(value || 0).toFixed(2)}`;
  }

  function spendTable(id, rows, empty) {
    return table(id, [["name"], ["spend", "num"], ["in loops", "num"]],
      rows.map((r) => h("tr", { "data-name": r.name },
        h("td", { class: "run" }, r.name), h("td", { class: "num" }, usd(r.spend_usd)),
        h("td", { class: "num", "data-loop-usd": r.loop_spend_usd }, usd(r.loop_spend_usd)))),
      empty);
  }

  // "$ burned in loops": what the model turns behind the calls cost (usage) since the view started
  function spendPanels(spend) {
    if (!spend) return "";
    const empty = "no usage reported (tool_call.usage)";
    return h("div", { class: "grid3", id: "spend" },
      panel(`$ burned in loops: ${usd(spend.loop_spend_usd)} of ${usd(spend.spend_usd)}`,
        h("div", { class: "scroll" }, table("spend-runs", [["run"], ["agent"], ["first detector"], ["in loop", "num"]],
          spend.runs.map((r) => h("tr", { "data-run": r.run },
            h("td", { class: "run" }, runLink(r.run)), h("td", {}, r.agent), h("td", {}, r.detector || ""),
            h("td", { class: "num" }, usd(r.loop_spend_usd)))),
          "no loop has cost anything yet"))),
      panel("Spend by agent", spendTable("spend-agents", spend.per_agent, empty)),
      panel("Spend by tool", spendTable("spend-tools", spend.per_tool, empty)));
  }

  function activityRow(e) {
    let kind = e.kind, detail = e.preview ?? "", tool = e.tool ?? "";
    if (e.kind === "result") kind = e.outcome;
    if (e.kind === "verdict" || e.kind === "abort") { kind = e.action; detail = `${e.detector} (${e.count ?? "–"}): ${e.message}`; }
    if (e.kind === "compaction") detail = "context overflow: compaction and retry";
    if (e.kind === "run_end") detail = "run ended";
    return h("tr", { "data-kind": e.kind },
      h("td", { class: "mono" }, time(e.ts_ms)), h("td", {}, badge(kind, kind.replace("_", " "))),
      h("td", {}, tool), h("td", {}, fingerprint(e.args)), h("td", { class: "msg" }, detail));
  }

  function renderRun(run) {
    const counts = run.verdicts;
    document.title = `loopwatch — ${run.run}`;
    main.replaceChildren(
      h("p", {}, h("a", { href: "#/" }, "← fleet")),
      h("h1", { id: "run-id" }, run.run),
      h("p", {}, "agent ", h("strong", { id: "run-agent" }, run.agent_id), " · ", badge(run.status), " ",
        run.worst ? badge(run.worst, `worst: ${run.worst}`) : "",
        h("span", { class: "legend" }, ` first seen ${time(run.first_ms)}, last ${time(run.last_ms)}`)),
      run.parent_run_id || run.chain_runs > 1 ? h("p", { id: "run-chain" },
        run.parent_run_id ? ["started by ", runLink(run.parent_run_id), ` · depth ${run.depth}`,
          run.root_run_id !== run.parent_run_id ? [" · root ", runLink(run.root_run_id)] : "", " · "] : "",
        h("a", { id: "run-chain-link", href: `#/chain/${encodeURIComponent(run.root_run_id)}`, "data-chain-link": run.root_run_id },
          `chain (${num(run.chain_runs)} runs known)`)) : "",
      h("div", { class: "kpis" },
        kpi("calls", "tool calls", run.calls), kpi("results", "results", run.results),
        kpi("errors", "error results", run.errors), kpi("compactions", "compactions", run.compactions),
        kpi("warn", "warnings", counts.warn || 0, "warn"), kpi("block", "blocks", counts.block || 0, "block"),
        kpi("abort", "aborts", counts.abort || 0, "abort")),
      panel("What fired", table("run-detectors", [["detector"], [""], ["verdicts", "num"], ["first"], ["last"], ["highest count", "num"]],
        run.fired.map((d) => h("tr", { "data-name": d.detector },
          h("td", {}, d.detector), h("td", {}, badge(d.action)), h("td", { class: "num" }, num(d.verdicts)),
          h("td", { class: "mono" }, time(d.first_ms)), h("td", { class: "mono" }, time(d.last_ms)),
          h("td", { class: "num" }, d.count ? num(d.count) : "–"))),
        "no verdicts for this run")),
      h("div", { class: "grid run-grid" },
        panel(`Latest verdicts (${run.verdict_list.length} of ${sum(Object.values(counts))}, newest first)`,
          h("div", { class: "scroll" }, table("verdicts", [["time"], [""], ["detector"], ["tool"], ["count", "num"], ["message"]],
            run.verdict_list.slice().reverse().map((v) => h("tr", { "data-verdict-id": v.verdict_id, "data-action": v.action },
              h("td", { class: "mono" }, time(v.ts_ms)), h("td", {}, badge(v.action)), h("td", {}, v.detector),
              h("td", {}, v.tool), h("td", { class: "num" }, num(v.count)), h("td", { class: "msg" }, v.message))),
            "no verdicts for this run"))),
        panel("Recent calls, results and verdicts (newest first)",
          h("div", { class: "scroll" }, table("recent", [["time"], [""], ["tool"], ["args"], ["detail"]],
            run.recent.slice().reverse().map(activityRow), "nothing yet")))));
  }

  const NOTES = {
    root_not_seen: "root: not seen in this view",
    parent_not_seen: "parent not seen in this view",
    cycle: "its parents lead round in a circle",
  };

  function chainVerdicts(row) {
    if (!row.fired || !row.fired.length) return h("span", { class: "sub" }, row.fired ? "none" : "");
    return row.fired.map((f) => h("div", { class: "fired", "data-detector": f.detector, "data-action": f.action,
      "data-level": f.level, "data-verdicts": f.verdicts },
      badge(f.action), ` ${f.detector} · ${f.level} · ×${num(f.verdicts)}`, f.count ? ` · count ${num(f.count)}` : ""));
  }

  // a delegation chain: its runs as a tree, depth first, each with what fired in it
  function renderChain(chain) {
    document.title = `loopwatch — chain ${chain.root}`;
    const counts = chain.verdicts || {};
    main.replaceChildren(
      h("p", {}, h("a", { href: "#/" }, "← fleet")),
      h("h1", {}, "delegation chain ", h("span", { id: "chain-root" }, chain.root)),
      h("p", { id: "chain-summary" }, `${num(chain.runs)} runs of ${num(chain.agents)} agents known in this view, deepest depth ${num(chain.max_depth)}`,
        ` · ${num(chain.aborted_runs)} aborted`,
        chain.parent_not_seen ? ` · ${num(chain.parent_not_seen)} whose parent is not seen` : "",
        chain.cycles ? ` · ${num(chain.cycles)} in a circle of parents` : ""),
      h("div", { class: "kpis" },
        kpi("runs", "runs", chain.runs), kpi("aborted_runs", "aborted runs", chain.aborted_runs, "abort"),
        kpi("warn", "warnings", counts.warn || 0, "warn"), kpi("block", "blocks", counts.block || 0, "block"),
        kpi("abort", "aborts", counts.abort || 0, "abort")),
      chain.alerts.length ? panel("Alerts of this chain", table("chain-alerts-of", [["time"], ["kind"], ["runs", "num"], ["message"]],
        chain.alerts.map((a) => h("tr", { "data-alert-id": a.alert_id, class: "alert-row" },
          h("td", { class: "mono" }, time(a.seen_ms ?? a.ts)), h("td", {}, a.kind), h("td", { class: "num" }, num(a.runs)),
          h("td", { class: "msg" }, a.message))), "")) : "",
      panel(`Runs (${num(chain.shown)} shown${chain.hidden ? `, ${num(chain.hidden)} more not shown` : ""}; depth first, oldest first)`,
        chain.hidden ? h("div", { class: "notice", id: "chain-hidden" },
          `${num(chain.hidden)} more runs of this chain are not shown: the first ${num(chain.shown)} are, depth first.`) : "",
        h("div", { class: "scroll tall" }, table("chain-tree", [["run · agent"], ["depth", "num"], ["status"], ["calls", "num"], ["verdicts"], [""]],
          chain.rows.map((r) => h("tr", { "data-run": r.run, "data-level": r.level, "data-depth": r.depth ?? "",
              "data-aborted": r.aborted ? "true" : "false", "data-note": r.note ?? "" },
            h("td", { class: "tree", style: `padding-left:${Math.min(r.level, 24) * 18 + 6}px` },
              r.level ? h("span", { class: "branch" }, r.level > 24 ? `↳${r.level} ` : "└ ") : "",
              r.note === "root_not_seen" ? h("span", { class: "run-id" }, r.run) : runLink(r.run),
              r.agent_id !== undefined ? h("div", { class: "sub" }, r.agent_id) : ""),
            h("td", { class: "num" }, r.depth ?? "–"),
            h("td", {}, r.status ? badge(r.status) : "", r.aborted ? [" ", badge("abort", "aborted")] : ""),
            h("td", { class: "num" }, r.calls ?? "–"),
            h("td", { class: "chain-verdicts" }, chainVerdicts(r)),
            h("td", { class: "sub" }, r.note ? NOTES[r.note] || r.note : "",
              r.note === "parent_not_seen" ? [": ", r.parent_run_id] : ""))),
          "no runs of this chain are kept in this view"))));
  }

  function setStatus(state, text) {
    status.dataset.state = state;
    status.textContent = text;
  }

  // A gateway with tokens answers 401: the page asks for one once and keeps it for this tab
  // (sessionStorage, never in a URL); every fetch sends it as a bearer token.
  const TOKEN_KEY = "loopwatch-token";
  function authHeaders() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    return token ? { Authorization: `Bearer ${token}` } : {};
  }
  function askForToken(message) {
    const input = h("input", { id: "token", type: "password", autocomplete: "current-password",
      placeholder: "bearer token", "aria-label": "bearer token" });
    const form = h("form", { id: "login", class: "notice" },
      h("p", {}, message), input, h("button", { type: "submit" }, "open"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      refresh();
    });
    main.replaceChildren(form);
    input.focus();
    setStatus("error", "a token is needed");
  }

  async function refresh() {
    const mine = ++generation;
    clearTimeout(timer);
    const match = location.hash.match(/^#\/(run|chain)\/(.+)$/);
    const url = !match ? `/fleet/overview?minutes=${minutes.value}`
      : match[1] === "run" ? `/fleet/run?id=${match[2]}` : `/fleet/chain?root=${match[2]}`;
    try {
      const response = await fetch(url, { cache: "no-store", headers: authHeaders() });
      if (response.status === 401) {
        if (mine !== generation) return;
        const had = sessionStorage.getItem(TOKEN_KEY);
        sessionStorage.removeItem(TOKEN_KEY);
        askForToken(had ? "That token was refused. Bearer token:" : "This loopwatch needs a bearer token:");
        return;  // polling resumes once a token is given
      }
      const body = await response.json();
      if (mine !== generation) return;
      if (match && response.status === 404) {
        main.replaceChildren(h("p", {}, h("a", { href: "#/" }, "← fleet")),
          h("div", { class: "notice", id: `${match[1]}-missing` }, body.error));
      } else if (!response.ok) {
        throw new Error(body.error || `HTTP ${response.status}`);
      } else if (match) {
        if (match[1] === "run") renderRun(body);
        else renderChain(body);
      } else {
        document.title = "loopwatch — fleet";
        renderFleet(body);
      }
      setStatus("live", `live · ${time(body.as_of_ms || Date.now())}${body.source ? ` · ${body.source}` : ""}`);
      document.body.dataset.loaded = url;
    } catch (error) {
      if (mine !== generation) return;
      setStatus("error", `cannot reach loopwatch: ${error.message}`);
    }
    if (mine === generation) timer = setTimeout(refresh, POLL_MS);
  }

  document.getElementById("find-run").addEventListener("submit", (event) => {
    event.preventDefault();
    const wanted = document.getElementById("run-query").value.trim();
    if (wanted) location.hash = `#/run/${encodeURIComponent(wanted)}`;
  });
  window.addEventListener("hashchange", refresh);
  minutes.addEventListener("change", refresh);
  refresh();
})();
