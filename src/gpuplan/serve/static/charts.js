// Small SVG charts, drawn here (no plotting library): a stacked bar, a line chart with marks, a scatter.
"use strict";
const COLORS = ["#3b6fb6", "#e08a2c", "#4e9a5b", "#c44e52", "#8172b2", "#937860", "#6c9fb8", "#b8b14f"];

function svgBox(w, hgt, cls) {
  return h("svg", {viewBox: `0 0 ${w} ${hgt}`, width: "100%", class: cls, role: "img",
                   preserveAspectRatio: "xMidYMid meet"});
}

// segments: [{label, value, color}], capacity: a vertical mark; keep: the free share kept (headroom)
function stackBar({segments, capacity, keep, format, title}) {
  const W = 640, H = 136, L = 10, R = 10, top = 34, barH = 30;
  const total = segments.reduce((s, x) => s + Math.max(0, x.value), 0);
  const max = Math.max(total, capacity || 0) * 1.04 || 1;
  const sx = v => L + (W - L - R) * v / max;
  const s = svgBox(W, H, "chart stackbar");
  s.append(h("text", {x: L, y: 16, class: "ctitle"}, title || ""));
  let x = 0;
  segments.forEach((seg, i) => {
    if (seg.value <= 0) return;
    const r = h("rect", {x: sx(x), y: top, width: Math.max(0.5, sx(x + seg.value) - sx(x)), height: barH,
                         fill: seg.color || COLORS[i % COLORS.length], "data-segment": seg.label},
                h("title", {}, `${seg.label}: ${format(seg.value)}`));
    s.append(r);
    x += seg.value;
  });
  if (capacity) {
    const cx = sx(capacity);
    s.append(h("line", {x1: cx, x2: cx, y1: top - 8, y2: top + barH + 8, class: "cap"}));
    s.append(h("text", {x: cx, y: top - 11, class: "caplabel", "text-anchor": cx > W - 120 ? "end" : "middle"},
               `capacity ${format(capacity)}`));
    if (keep) {  // the share of capacity kept free: a shaded band before the capacity line
      const kx = sx(capacity * (1 - keep));
      s.append(h("rect", {x: kx, y: top - 4, width: Math.max(1, cx - kx), height: barH + 8, class: "keep"},
                 h("title", {}, `headroom kept free: ${+(keep * 100).toFixed(1)}% of capacity`)));
    }
  }
  let lx = L, ly = top + barH + 14;
  segments.forEach((seg, i) => {
    if (seg.value <= 0) return;
    const label = `${seg.short || seg.label} ${format(seg.value)}`;
    const w = 14 + label.length * 6.2;
    if (lx + w > W) { lx = L; ly += 18; }
    s.append(h("rect", {x: lx, y: ly, width: 10, height: 10, fill: seg.color || COLORS[i % COLORS.length]}));
    s.append(h("text", {x: lx + 14, y: ly + 9, class: "legend"}, label));
    lx += w + 10;
  });
  return s;
}

function niceTicks(lo, hi, n = 5) {
  const step0 = (hi - lo) / n || 1;
  const mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= step0) || step0;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

// 1, 2, 5 × 10^k between lo and hi (a log axis), thinned to at most ~7
function logTicks(lo, hi) {
  const out = [];
  for (let p = Math.floor(Math.log10(lo)); 10 ** p <= hi; p++) {
    for (const m of [1, 2, 5]) { const v = m * 10 ** p; if (v >= lo && v <= hi) out.push(v); }
  }
  if (out.length < 3) return niceTicks(lo, hi, 4).filter(t => t > 0);  // a narrow range: linear steps
  return out.length > 7 ? out.filter(v => String(v).startsWith("1")) : out;
}

function log2Ticks(lo, hi) {
  const out = [];
  for (let p = Math.floor(Math.log2(lo)); 2 ** p <= hi; p++) if (2 ** p >= lo) out.push(2 ** p);
  return out.length > 9 ? out.filter((_, i) => i % 2 === 0) : out;
}

// points: [{x, y, title}]; marks: [{x, y, label, kind}]; vlines: [{x, label}]; ideal: a dashed y = y0·x/x0 line
function lineChart({points, marks = [], vlines = [], xlabel, ylabel, yfmt, ideal, note}) {
  const W = 640, H = 300, L = 64, R = 16, T = 22, B = 44;
  const s = svgBox(W, H, "chart line");
  if (!points.length) return s;
  const xs = points.map(p => p.x), ys = points.map(p => p.y);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 * 2);
  const ya = Math.min(...ys) / 1.25, yb = Math.max(...ys) * 1.25;
  const sx = v => L + (W - L - R) * Math.log(v / x0) / Math.log(x1 / x0);
  const sy = v => T + (H - T - B) * (1 - Math.log(v / ya) / Math.log(yb / ya));
  for (const t of logTicks(ya, yb)) {
    s.append(h("line", {x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "grid"}));
    s.append(h("text", {x: L - 6, y: sy(t) + 4, "text-anchor": "end", class: "tick"}, yfmt(t)));
  }
  for (const t of log2Ticks(x0, x1)) {
    s.append(h("text", {x: sx(t), y: H - B + 16, "text-anchor": "middle", class: "tick"}, fmt.count(t, 1)));
  }
  s.append(h("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", class: "axis"}, xlabel));
  s.append(h("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle", class: "axis",
                      transform: `rotate(-90 14 ${(T + H - B) / 2})`}, ylabel));
  if (note) s.append(h("text", {x: L + 4, y: 12, class: "vlabel"}, note));
  for (const v of vlines) {
    if (v.x < x0 || v.x > x1) continue;
    s.append(h("line", {x1: sx(v.x), x2: sx(v.x), y1: T, y2: H - B, class: "vline", "data-mark": v.kind}));
    s.append(h("text", {x: sx(v.x) + 4, y: T + 10, class: "vlabel"}, v.label));
  }
  if (ideal) {
    const p0 = points[0];
    const end = Math.min(x1, p0.x * yb / p0.y);
    s.append(h("line", {x1: sx(p0.x), y1: sy(p0.y), x2: sx(end), y2: sy(p0.y * end / p0.x), class: "ideal"},
               h("title", {}, "proportional speed-up")));
  }
  s.append(h("polyline", {points: points.map(p => `${sx(p.x)},${sy(p.y)}`).join(" "), class: "series"}));
  for (const p of points) {
    s.append(h("circle", {cx: sx(p.x), cy: sy(p.y), r: 3, class: "dot"}, h("title", {}, p.title)));
  }
  for (const m of marks) {
    const g = h("g", {class: `mark ${m.kind}`, "data-mark": m.kind, "data-gpus": m.x});
    g.append(h("circle", {cx: sx(m.x), cy: sy(m.y), r: 7}), h("title", {}, m.title || m.label));
    const right = sx(m.x) < W - 170;
    g.append(h("text", {x: sx(m.x) + (right ? 10 : -10), y: sy(m.y) + (m.dy || -10),
                        "text-anchor": right ? "start" : "end"}, m.label));
    s.append(g);
  }
  return s;
}

// points: [{x, y, title, onclick}] on log-log axes
function scatter({points, xlabel, ylabel, xfmt, yfmt, selected, xticks}) {
  const W = 640, H = 300, L = 72, R = 16, T = 16, B = 44;
  const s = svgBox(W, H, "chart scatter");
  if (!points.length) return s;
  const xs = points.map(p => Math.log10(p.x)), ys = points.map(p => Math.log10(p.y));
  const pad = (lo, hi) => (hi - lo < 0.05 ? [lo - 0.05, hi + 0.05] : [lo - (hi - lo) * 0.06, hi + (hi - lo) * 0.06]);
  const [xa, xb] = pad(Math.min(...xs), Math.max(...xs)), [ya, yb] = pad(Math.min(...ys), Math.max(...ys));
  const sx = v => L + (W - L - R) * (Math.log10(v) - xa) / (xb - xa);
  const sy = v => T + (H - T - B) * (1 - (Math.log10(v) - ya) / (yb - ya));
  for (const t of logTicks(10 ** ya, 10 ** yb)) {
    s.append(h("line", {x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "grid"}));
    s.append(h("text", {x: L - 6, y: sy(t) + 4, "text-anchor": "end", class: "tick"}, yfmt(t)));
  }
  for (const t of xticks ? xticks(10 ** xa, 10 ** xb) : logTicks(10 ** xa, 10 ** xb)) {
    s.append(h("text", {x: sx(t), y: H - B + 16, "text-anchor": "middle", class: "tick"}, xfmt(t)));
  }
  s.append(h("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", class: "axis"}, xlabel));
  s.append(h("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle", class: "axis",
                      transform: `rotate(-90 14 ${(T + H - B) / 2})`}, ylabel));
  const sorted = [...points].sort((a, b) => a.x - b.x);
  s.append(h("polyline", {points: sorted.map(p => `${sx(p.x)},${sy(p.y)}`).join(" "), class: "frontier"}));
  points.forEach((p, i) => {
    s.append(h("circle", {cx: sx(p.x), cy: sy(p.y), r: i === selected ? 7 : 5, tabindex: 0,
                          class: `pt${i === selected ? " selected" : ""}`, "data-index": i, onclick: p.onclick,
                          onkeydown: e => { if (e.key === "Enter") p.onclick(); }},
                        h("title", {}, p.title)));
  });
  return s;
}
