// streamon's live plan page: polls the worker's /streamon/status once a second and draws the
// query's stages, the orders in force per partition with their changes over time, the
// scheduler's progress charts, and live charts of backlog, throughput and latency.
// Plain JavaScript, no library: it must work offline, served by the worker itself.
"use strict";
(function () {
  const POLL_MS = 1000;
  const HISTORY = 180; // polls kept for the live charts (three minutes)
  const KEPT_CHANGES = 300; // order changes kept for the timeline
  const TOKEN_KEY = "streamon.token";
  const { color, el, fmt, clock, clip, chart, drawProgress } = window.streamonDraw;

  // A token given once as ?token= is kept for this tab and sent as a header on every poll.
  const given = new URLSearchParams(window.location.search).get("token");
  if (given) sessionStorage.setItem(TOKEN_KEY, given);
  const token = given || sessionStorage.getItem(TOKEN_KEY);

  const $ = (id) => document.getElementById(id);
  const history = []; // {t (worker ms), agents: {name: {in, backlog, latSum, latN}}, lag}
  const changes = new Map(); // id -> change (see noteChanges)
  const seen = new Map(); // order key -> {order, version}
  let polls = 0;
  let graphDrawn = "";

  // -- polling -------------------------------------------------------------------------------
  async function poll() {
    const conn = $("conn");
    try {
      const headers = token ? { Authorization: "Bearer " + token } : {};
      const response = await fetch("streamon/status", { headers: headers, cache: "no-store" });
      if (response.status === 401) {
        conn.textContent = "401: this worker needs its token (open the page as /?token=…)";
        conn.className = "conn bad";
        return;
      }
      if (!response.ok) throw new Error("status " + response.status);
      const body = await response.json();
      polls += 1;
      render(body);
      conn.textContent = "live · " + clock(body.time_ms || Date.now());
      conn.className = "conn ok";
      document.body.dataset.polls = String(polls);
    } catch (err) {
      conn.textContent = "no answer from the worker (" + err.message + ")";
      conn.className = "conn bad";
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  function render(body) {
    const now = body.time_ms || Date.now();
    remember(body, now);
    $("query").textContent = body.query || "";
    const sched = body.scheduling || {};
    $("meta").textContent = "worker " + body.worker_id + " · partitions held: " +
      (body.assignment || []).filter((a) => !a.startsWith("streamon.stats")).length +
      " · scheduling " + (sched.policy || "–");
    drawGraph(body);
    const rows = orderRows(body);
    noteChanges(rows, now);
    drawOrders(rows);
    drawTimeline(rows, now);
    drawLive();
    drawLag(body.commit_lag || []);
    drawScheduler(sched);
  }

  function agentsOf(body) {
    return ((body.stats || {}).agents || []).filter((a) => a.agent !== "scheduler");
  }

  function remember(body, now) {
    const agents = {};
    for (const a of agentsOf(body)) {
      const n = (a.latency_buckets || []).reduce((x, y) => x + y, 0);
      agents[a.agent] = { in: a.tuples_in || 0, backlog: a.backlog_tuples || 0,
                          latSum: a.latency_s_sum || 0, latN: n };
    }
    const lag = (body.commit_lag || []).reduce((x, e) => x + (e.lag || 0), 0);
    history.push({ t: now, agents: agents, lag: lag });
    while (history.length > HISTORY) history.shift();
  }

  // -- the plan graph ------------------------------------------------------------------------
  function drawGraph(body) {
    const graph = body.graph || { nodes: [], edges: [] };
    const svg = $("graph");
    const key = JSON.stringify(graph);
    if (key !== graphDrawn) layoutGraph(svg, graph);
    graphDrawn = key;
    const rates = rateByAgent();
    const byName = {};
    for (const a of agentsOf(body)) byName[a.agent] = a;
    for (const g of svg.querySelectorAll("g.node.agent")) {
      const a = byName[g.dataset.id];
      const live = g.querySelector(".live");
      if (!live) continue;
      live.textContent = a
        ? fmt(rates[g.dataset.id]) + " in/s · backlog " + fmt(a.backlog_tuples) +
          " · " + fmt(a.tuples_out) + " out"
        : "(not on this worker)";
    }
  }

  function layoutGraph(svg, graph) {
    svg.replaceChildren();
    const depth = {};
    for (const n of graph.nodes) depth[n.id] = 0;
    for (let i = 0; i < graph.nodes.length; i++) { // longest path from a source
      for (const [a, b] of graph.edges) depth[b] = Math.max(depth[b], depth[a] + 1);
    }
    const columns = [];
    for (const n of graph.nodes) (columns[depth[n.id]] = columns[depth[n.id]] || []).push(n);
    const COL = 250, W = 210, GAP = 16;
    const box = {};
    let height = 0;
    columns.forEach((col, c) => {
      let y = 10;
      for (const n of col) {
        const lines = n.kind === "agent" ? wrap(n.stages || [], 30) : [];
        const h = n.kind === "agent" ? 40 + 13 * lines.length : 30;
        box[n.id] = { x: 10 + c * COL, y: y, w: W, h: h, lines: lines };
        y += h + GAP;
      }
      height = Math.max(height, y);
    });
    svg.setAttribute("width", String(20 + columns.length * COL - (COL - W)));
    svg.setAttribute("height", String(height));
    const defs = el("svg:defs");
    const marker = el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
                                     markerWidth: 7, markerHeight: 7, orient: "auto" });
    marker.appendChild(el("svg:path", { d: "M0,0 L10,5 L0,10 z", fill: "#94a3b8" }));
    defs.appendChild(marker);
    svg.appendChild(defs);
    for (const [a, b] of graph.edges) {
      const s = box[a], t = box[b];
      if (!s || !t) continue;
      const x1 = s.x + s.w, y1 = s.y + s.h / 2, x2 = t.x - 2, y2 = t.y + t.h / 2;
      const mx = (x1 + x2) / 2;
      svg.appendChild(el("svg:path", { class: "edge", "marker-end": "url(#arrow)",
        d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }));
    }
    for (const n of graph.nodes) {
      const b = box[n.id];
      const cls = "node " + n.kind + (n.kind === "topic" && !n.external ? " internal" : "");
      const g = el("svg:g", { class: cls, "data-id": n.id, "data-kind": n.kind,
                              transform: `translate(${b.x},${b.y})` });
      g.appendChild(el("svg:rect", { width: b.w, height: b.h, rx: n.kind === "topic" ? 14 : 5 }));
      g.appendChild(el("svg:title", {}, n.id + (n.stages ? ": " + n.stages.join(" › ") : "")));
      g.appendChild(el("svg:text", { x: 8, y: n.kind === "topic" ? 19 : 16 }, clip(n.id, 32)));
      b.lines.forEach((line, i) => {
        g.appendChild(el("svg:text", { x: 8, y: 30 + 13 * i, class: "small stages" }, line));
      });
      if (n.kind === "agent") {
        g.appendChild(el("svg:text", { x: 8, y: b.h - 7, class: "small live" }, ""));
      }
      svg.appendChild(g);
    }
  }

  function wrap(items, width) {
    const lines = [];
    let line = "";
    for (const item of items) {
      const next = line ? line + " › " + item : item;
      if (line && next.length > width) { lines.push(line + " ›"); line = item; } else line = next;
    }
    if (line) lines.push(line);
    return lines;
  }

  function rateByAgent() {
    const out = {};
    if (history.length < 2) return out;
    const a = history[history.length - 2], b = history[history.length - 1];
    const dt = (b.t - a.t) / 1000;
    for (const [name, s] of Object.entries(b.agents)) {
      const before = a.agents[name];
      if (before && dt > 0) out[name] = Math.max(0, (s.in - before.in) / dt);
    }
    return out;
  }

  // -- orders per partition ------------------------------------------------------------------
  // One row per (agent, partition, stage, pipeline): a filter chain's order, or the probe order
  // of one of an MJoin's pipelines; with the stage's kept changes (time_ms, from, to, reason).
  function orderRows(body) {
    const rows = [];
    for (const a of agentsOf(body)) {
      const plan = a.plan || {};
      for (const [partition, unit] of Object.entries(plan)) {
        if (!unit || typeof unit !== "object") continue;
        const stages = "kind" in unit ? [[unit.kind, unit]]
          : Object.entries(unit).filter(([, v]) => v && typeof v === "object");
        for (const [named, s] of stages) {
          const stage = named.replace(/\[\d+\]$/, ""); // "mjoin[0]": the partition is shown
          const recent = Array.isArray(s.recent_changes) ? s.recent_changes : [];
          const version = s.changes_total || 0;
          if (Array.isArray(s.order)) {
            rows.push({ agent: a.agent, partition, stage, pipeline: "", order: s.order,
                        version, recent });
          }
          for (const [pipeline, order] of Object.entries(s.orders || {})) {
            rows.push({ agent: a.agent, partition, stage, pipeline, order, version,
                        recent: recent.filter((c) => String(c.pipeline) === pipeline) });
          }
        }
      }
    }
    rows.sort((x, y) => (Number(x.partition) - Number(y.partition)) ||
      x.stage.localeCompare(y.stage) || x.pipeline.localeCompare(y.pipeline));
    for (const r of rows) r.key = [r.agent, r.partition, r.stage, r.pipeline].join("|");
    return rows;
  }

  // Changes the worker kept (with its time) are taken as they are; a change of order the page
  // saw between two polls without such an entry is added with the poll's time.
  function noteChanges(rows, now) {
    for (const r of rows) {
      for (const c of r.recent) {
        const id = r.key + "|" + c.time_ms + "|" + JSON.stringify(c.to);
        if (!changes.has(id)) {
          changes.set(id, { id, row: r, t: c.time_ms, from: c.from, to: c.to,
                            reason: c.reason || "", by: "worker" });
        }
      }
      const last = seen.get(r.key);
      const order = JSON.stringify(r.order);
      if (last && last.order !== order) {
        const logged = r.recent.some((c) => JSON.stringify(c.to) === order);
        if (!logged) {
          const id = r.key + "|" + now + "|" + order;
          changes.set(id, { id, row: r, t: now, from: JSON.parse(last.order), to: r.order,
                            reason: "seen by this page", by: "page" });
        }
        r.fresh = true;
      }
      seen.set(r.key, { order, version: r.version });
    }
    while (changes.size > KEPT_CHANGES) changes.delete(changes.keys().next().value);
  }

  function drawOrders(rows) {
    const tbody = $("orders").tBodies[0];
    tbody.replaceChildren();
    if (!rows.length) {
      const tr = el("tr");
      tr.appendChild(el("td", { colspan: 5, class: "empty" }, "no filter or join order on this worker's partitions yet"));
      tbody.appendChild(tr);
      return;
    }
    for (const r of rows) {
      const tr = el("tr", { class: r.fresh ? "fresh order-row" : "order-row",
        "data-agent": r.agent, "data-partition": r.partition, "data-stage": r.stage,
        "data-pipeline": r.pipeline, "data-version": r.version,
        "data-order": JSON.stringify(r.order) });
      tr.appendChild(el("td", {}, r.partition));
      tr.appendChild(el("td", {}, r.stage === r.agent ? r.stage : r.agent + " / " + r.stage));
      tr.appendChild(el("td", {}, r.pipeline || "–"));
      const td = el("td");
      r.order.forEach((name, i) => {
        td.appendChild(el("span", { class: i === 0 ? "chip first" : "chip" }, name));
      });
      tr.appendChild(td);
      tr.appendChild(el("td", { class: "num" }, r.version));
      tbody.appendChild(tr);
    }
  }

  function drawTimeline(rows, now) {
    const svg = $("timeline");
    svg.replaceChildren();
    const all = [...changes.values()];
    const lanes = rows.map((r) => r.key);
    const span = Math.min(Math.max(60e3, ...all.map((c) => now - c.t + 5e3)), 15 * 60e3);
    const W = Math.max(480, svg.parentNode.clientWidth - 4), LEFT = 170, LANE = 16, TOP = 8;
    const H = TOP + LANE * Math.max(lanes.length, 1) + 24;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("width", String(W));
    svg.setAttribute("height", String(H));
    const x = (t) => LEFT + (W - LEFT - 10) * (1 - (now - t) / span);
    lanes.forEach((key, i) => {
      const y = TOP + LANE * i + LANE / 2;
      const r = rows[i];
      svg.appendChild(el("svg:line", { class: "lane", x1: LEFT, x2: W - 10, y1: y, y2: y }));
      const label = "p" + r.partition + " " + r.stage + (r.pipeline ? " " + r.pipeline : "");
      svg.appendChild(el("svg:text", { x: 4, y: y + 4, class: "small" }, clip(label, 26)));
    });
    const base = TOP + LANE * Math.max(lanes.length, 1) + 4;
    svg.appendChild(el("svg:line", { class: "axis", x1: LEFT, x2: W - 10, y1: base, y2: base }));
    for (let k = 0; k <= 4; k++) {
      const t = now - span * (1 - k / 4);
      svg.appendChild(el("svg:text", { x: x(t) - 22, y: base + 15, class: "small" }, clock(t)));
    }
    for (const c of all) {
      const lane = lanes.indexOf(c.row.key);
      if (lane < 0 || now - c.t > span) continue;
      const mark = el("svg:circle", { class: "mark", cx: x(c.t), cy: TOP + LANE * lane + LANE / 2,
                                      r: 5, "data-key": c.row.key });
      mark.appendChild(el("svg:title", {}, clock(c.t) + ": " + (c.to || []).join(" › ") +
                                           " (" + c.reason + ")"));
      svg.appendChild(mark);
    }
    const list = $("changes");
    list.replaceChildren();
    const latest = all.sort((a, b) => b.t - a.t).slice(0, 30);
    if (!latest.length) list.appendChild(el("li", { class: "empty" }, "no order change yet"));
    for (const c of latest) {
      const li = el("li", { class: "change", "data-partition": c.row.partition,
        "data-stage": c.row.stage, "data-pipeline": c.row.pipeline,
        "data-to": JSON.stringify(c.to), "data-by": c.by });
      li.appendChild(el("span", { class: "when" }, clock(c.t) + " "));
      const where = "partition " + c.row.partition + ", " + c.row.stage +
        (c.row.pipeline ? " (" + c.row.pipeline + ")" : "");
      li.appendChild(document.createTextNode(where + ": " + (c.from || []).join(" › ") + "  ⟶  " +
        (c.to || []).join(" › ") + (c.reason ? " — " + c.reason : "")));
      list.appendChild(li);
    }
  }

  // -- live charts ---------------------------------------------------------------------------
  function drawLive() {
    const names = new Set();
    for (const h of history) for (const n of Object.keys(h.agents)) names.add(n);
    const backlog = [], throughput = [], latency = [];
    for (const name of names) {
      const b = [], r = [], l = [];
      let any = false, anyLat = false;
      for (let i = 0; i < history.length; i++) {
        const h = history[i], s = h.agents[name];
        if (!s) continue;
        b.push([h.t, s.backlog]);
        if (s.backlog > 0) any = true;
        const p = i > 0 ? history[i - 1].agents[name] : null;
        const dt = i > 0 ? (h.t - history[i - 1].t) / 1000 : 0;
        if (p && dt > 0) r.push([h.t, Math.max(0, (s.in - p.in) / dt)]);
        if (p && s.latN > p.latN) {
          l.push([h.t, 1000 * (s.latSum - p.latSum) / (s.latN - p.latN)]);
          anyLat = true;
        } else if (p) l.push([h.t, null]);
      }
      if (any) backlog.push({ name, points: b });
      if (r.some(([, v]) => v > 0)) throughput.push({ name, points: r });
      if (anyLat) latency.push({ name, points: l });
    }
    const lag = history.map((h) => [h.t, h.lag]);
    if (lag.some(([, v]) => v > 0)) backlog.push({ name: "commit lag (all partitions)", points: lag });
    const t1 = history.length ? history[history.length - 1].t : Date.now();
    chart("backlog", backlog, t1, HISTORY * POLL_MS);
    chart("throughput", throughput, t1, HISTORY * POLL_MS);
    chart("latency", latency, t1, HISTORY * POLL_MS);
  }

  function drawLag(lags) {
    const tbody = $("lag").tBodies[0];
    tbody.replaceChildren();
    if (!lags.length) {
      const tr = el("tr");
      tr.appendChild(el("td", { colspan: 5, class: "empty" }, "no partition fetched yet"));
      tbody.appendChild(tr);
    }
    for (const e of lags) {
      const tr = el("tr");
      tr.appendChild(el("td", {}, e.topic));
      tr.appendChild(el("td", { class: "num" }, e.partition));
      tr.appendChild(el("td", { class: "num" }, e.high_watermark));
      tr.appendChild(el("td", { class: "num" }, e.committed));
      tr.appendChild(el("td", { class: "num" }, e.lag));
      tbody.appendChild(tr);
    }
  }

  // -- scheduler -----------------------------------------------------------------------------
  function drawScheduler(sched) {
    const arbiter = sched.arbiter || {};
    $("sched-summary").textContent = "policy " + (sched.policy || "–") + " (arbiter: " +
      (arbiter.policy || "–") + ") · plan version " + (sched.plan_version || 0) +
      " · " + (sched.scheduler_here ? "the scheduler runs on this worker" :
               "the scheduler runs on the worker reading streamon.stats") +
      " · " + fmt(arbiter.decisions || 0) + " decisions";
    const svg = $("progress");
    svg.replaceChildren();
    const legend = $("legend-progress");
    legend.replaceChildren();
    const plan = sched.plan;
    if (!plan || !plan.paths) {
      svg.setAttribute("width", "0");
      svg.setAttribute("height", "0");
      legend.appendChild(el("span", { class: "empty" },
        "no scheduling plan yet (the scheduler publishes one once it has measured the agents)"));
    } else {
      drawProgress(svg, legend, plan);
    }
    const tbody = $("priorities").tBodies[0];
    tbody.replaceChildren();
    const prio = arbiter.priorities || {};
    const agents = arbiter.agents || {};
    const names = [...new Set([...Object.keys(prio), ...Object.keys(agents)])];
    names.sort((a, b) => (prio[b] ?? -Infinity) - (prio[a] ?? -Infinity) || a.localeCompare(b));
    for (const n of names) {
      const tr = el("tr", { "data-agent": n });
      const a = agents[n] || {};
      tr.appendChild(el("td", {}, n));
      tr.appendChild(el("td", { class: "num" }, n in prio ? fmt(prio[n]) : "–"));
      tr.appendChild(el("td", { class: "num" }, fmt(a.grants || 0)));
      tr.appendChild(el("td", { class: "num" }, (1000 * (a.wait_s_avg || 0)).toFixed(1)));
      tbody.appendChild(tr);
    }
  }

  poll();
})();
