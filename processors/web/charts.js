// streamon's plan page, its drawing helpers: elements, number and time formats, colours,
// the live line charts (canvas) and the scheduler's progress charts with their lower
// envelopes (SVG). Plain JavaScript, no library; plan.js uses them as window.streamonDraw.
"use strict";
(function () {
  const COLORS = ["#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2",
                  "#db2777", "#65a30d", "#475569", "#ea580c"];
  const SVG_NS = "http://www.w3.org/2000/svg";
  const colorOf = new Map();

  function color(name) {
    if (!colorOf.has(name)) colorOf.set(name, COLORS[colorOf.size % COLORS.length]);
    return colorOf.get(name);
  }

  function el(tag, attrs, text) {
    const node = tag.startsWith("svg:")
      ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    }
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function fmt(x) {
    if (x === null || x === undefined || !isFinite(x)) return "–";
    const a = Math.abs(x);
    if (a >= 1e9) return (x / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (x / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (x / 1e3).toFixed(0) + "k";
    if (a >= 1e3) return (x / 1e3).toFixed(1) + "k";
    if (a >= 10 || Number.isInteger(x)) return x.toFixed(0);
    return x.toPrecision(2);
  }

  function clock(ms) {
    return new Date(ms).toLocaleTimeString([], { hour12: false });
  }

  function clip(text, n) {
    return text.length > n ? "…" + text.slice(text.length - n + 1) : text;
  }

  // A line chart of ``series`` ({name, points: [[t, v or null]]}) over [t1 - span, t1] on the
  // canvas #chart-<id>, its legend in #legend-<id>.
  function chart(id, series, t1, span) {
    const canvas = document.getElementById("chart-" + id);
    const ratio = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 320, h = canvas.clientHeight || 170;
    if (canvas.width !== Math.round(w * ratio)) canvas.width = Math.round(w * ratio);
    if (canvas.height !== Math.round(h * ratio)) canvas.height = Math.round(h * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const legend = document.getElementById("legend-" + id);
    legend.replaceChildren();
    canvas.dataset.series = String(series.length);
    const L = 46, R = 8, T = 8, B = 18;
    const t0 = t1 - span;
    let max = 0;
    for (const s of series) for (const [, v] of s.points) if (v !== null && v > max) max = v;
    max = max > 0 ? max * 1.15 : 1;
    const x = (t) => L + (w - L - R) * (t - t0) / (t1 - t0);
    const y = (v) => T + (h - T - B) * (1 - v / max);
    ctx.font = "10px system-ui, sans-serif";
    ctx.fillStyle = "#6b7280";
    ctx.strokeStyle = "#eef0f3";
    for (let k = 0; k <= 3; k++) {
      const v = max * k / 3, yy = y(v);
      ctx.beginPath(); ctx.moveTo(L, yy); ctx.lineTo(w - R, yy); ctx.stroke();
      ctx.fillText(fmt(v), 4, yy + 3);
    }
    ctx.fillText("-" + (span / 1000) + " s", L, h - 4);
    ctx.fillText("now", w - R - 20, h - 4);
    if (!series.length) {
      ctx.fillText("nothing yet", L + 10, T + 20);
      return;
    }
    for (const s of series) {
      ctx.strokeStyle = color(s.name);
      ctx.lineWidth = 1.6;
      ctx.beginPath();
      let pen = false;
      for (const [t, v] of s.points) {
        if (v === null) { pen = false; continue; }
        if (pen) ctx.lineTo(x(t), y(v)); else ctx.moveTo(x(t), y(v));
        pen = true;
      }
      ctx.stroke();
      const item = el("span");
      const swatch = el("i");
      swatch.style.background = color(s.name);
      item.appendChild(swatch);
      const last = s.points.length ? s.points[s.points.length - 1][1] : null;
      item.appendChild(document.createTextNode(s.name + " " + fmt(last)));
      legend.appendChild(item);
    }
  }

  // A path's progress chart from its operators' (time per tuple received, selectivity):
  // t_i = t_(i-1) + c_i s_(i-1), s_i = s_(i-1) sel_i, the last size 0 (the output leaves);
  // the lower envelope goes from each point to the later one of steepest descent.
  function progressChart(ops, stats) {
    const pts = [[0, 1]];
    let t = 0, s = 1;
    ops.forEach((op, i) => {
      const [c, sel] = stats[op] || [0, 1];
      t += c * s;
      s = i === ops.length - 1 ? 0 : s * sel;
      pts.push([t, s]);
    });
    return pts;
  }

  function lowerEnvelope(pts) {
    const out = [0];
    let i = 0;
    while (i < pts.length - 1) {
      let best = i + 1, slope = Infinity;
      for (let j = i + 1; j < pts.length; j++) {
        const dt = pts[j][0] - pts[i][0];
        const m = dt > 0 ? (pts[j][1] - pts[i][1]) / dt : -Infinity;
        if (m <= slope) { slope = m; best = j; }
      }
      out.push(best);
      i = best;
    }
    return out;
  }

  function drawProgress(svg, legend, plan) {
    const W = 560, H = 230, L = 44, R = 12, T = 10, B = 28;
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("width", String(W));
    svg.setAttribute("height", String(H));
    const charts = Object.entries(plan.paths).map(([path, ops]) =>
      ({ path, ops, pts: progressChart(ops, plan.stats || {}) }));
    const tmax = Math.max(1e-12, ...charts.map((c) => c.pts[c.pts.length - 1][0]));
    const x = (t) => L + (W - L - R) * t / tmax;
    const y = (s) => T + (H - T - B) * (1 - s);
    svg.appendChild(el("svg:line", { class: "axis", x1: L, x2: W - R, y1: y(0), y2: y(0) }));
    svg.appendChild(el("svg:line", { class: "axis", x1: L, x2: L, y1: y(1), y2: y(0) }));
    svg.appendChild(el("svg:text", { x: 4, y: y(1) + 4, class: "small" }, "size 1"));
    svg.appendChild(el("svg:text", { x: 4, y: y(0), class: "small" }, "0"));
    svg.appendChild(el("svg:text", { x: W - R - 150, y: H - 6, class: "small" },
      "time per input tuple: " + fmt(tmax)));
    for (const c of charts) {
      const hue = color("path " + c.path);
      svg.appendChild(el("svg:polyline", { class: "seg",
        points: c.pts.map(([t, s]) => x(t) + "," + y(s)).join(" ") }));
      const env = lowerEnvelope(c.pts);
      svg.appendChild(el("svg:polyline", { class: "env", stroke: hue, "data-path": c.path,
        points: env.map((i) => x(c.pts[i][0]) + "," + y(c.pts[i][1])).join(" ") }));
      c.pts.forEach(([t, s], i) => {
        const dot = el("svg:circle", { cx: x(t), cy: y(s), r: 3.5, fill: hue });
        dot.appendChild(el("svg:title", {}, i === 0 ? c.path + ": start" :
          c.ops[i - 1] + ": t=" + fmt(t) + ", size=" + s.toFixed(3)));
        svg.appendChild(dot);
      });
      const item = el("span");
      const swatch = el("i");
      swatch.style.background = hue;
      item.appendChild(swatch);
      item.appendChild(document.createTextNode("path " + c.path + ": " + c.ops.join(" › ") +
        " (grey: progress chart; colour: lower envelope)"));
      legend.appendChild(item);
    }
  }

  window.streamonDraw = { color, el, fmt, clock, clip, chart, progressChart, lowerEnvelope,
                          drawProgress };
})();
