// Numbers arrive in SI (bytes, seconds, USD); this file is the only place they become words.
"use strict";
const GiB = 1024 ** 3;

const fmt = {
  gib(b, digits = 1) { return b == null ? "–" : `${(b / GiB).toFixed(digits)} GiB`; },
  dur(s) {
    if (s == null) return "–";
    const a = Math.abs(s);
    if (a < 1) return `${(s * 1000).toFixed(a < 0.01 ? 2 : 1)} ms`;
    if (a < 120) return `${s.toFixed(2)} s`;
    if (a < 7200) return `${(s / 60).toFixed(1)} min`;
    if (a < 172800) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} days`;
  },
  usd(x) {
    if (x == null) return "–";
    if (Math.abs(x) < 100) return `$${x.toFixed(2)}`;
    return `$${Math.round(x).toLocaleString("en-US")}`;
  },
  count(n, digits = 2) {
    if (n == null) return "–";
    const units = [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "k"]];
    for (const [v, u] of units) if (Math.abs(n) >= v) return `${+(n / v).toFixed(digits)}${u}`;
    return `${+n.toFixed(digits)}`;
  },
  pct(x, digits = 1) { return x == null ? "–" : `${(x * 100).toFixed(digits)}%`; },
  int(n) { return n == null ? "–" : Math.round(n).toLocaleString("en-US"); },
};

// h("div", {class: "x", onclick: fn}, child, "text", ...): a DOM element
function h(tag, attrs, ...children) {
  const svgTags = new Set(["svg", "g", "rect", "line", "path", "circle", "text", "title", "polyline", "polygon"]);
  const e = svgTags.has(tag) ? document.createElementNS("http://www.w3.org/2000/svg", tag)
                             : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c == null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// a number on the page: its JSON key and exact value ride along (data-key, data-value)
function metric(label, key, value, text, hint) {
  return h("div", {class: "metric", "data-key": key, "data-value": value == null ? "" : String(value),
                   title: hint || null},
    h("div", {class: "label"}, label), h("div", {class: "value"}, text));
}

function get(obj, path) {
  return path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
}

function layoutText(lay) {
  if (!lay) return "–";
  const parts = [`dp ${lay.dp}`, `tp ${lay.tp}`, `pp ${lay.pp}`];
  if (lay.cp > 1) parts.push(`cp ${lay.cp}`);
  if (lay.ep > 1) parts.push(`ep ${lay.ep}`);
  parts.push(`zero ${lay.zero}${lay.zero_group ? `/${lay.zero_group}` : ""}`, `mb ${lay.micro_batch}`);
  if (lay.recompute && lay.recompute !== "none") parts.push(`recompute ${lay.recompute}`);
  if (lay.tp_overlap) parts.push("tp overlap");
  if (lay.pp > 1 && lay.pp_schedule) parts.push(lay.pp_schedule + (lay.virtual_stages > 1 ? `×${lay.virtual_stages}` : ""));
  if (lay.offload && lay.offload !== "none") parts.push(`offload ${lay.offload}`);
  return parts.join(" · ");
}

function download(filename, text, type) {
  const url = URL.createObjectURL(new Blob([text], {type}));
  const a = h("a", {href: url, download: filename});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// requests in flight and changes waiting for their debounce (tests wait for 0: the page has settled)
window.gpuplanBusy = 0;

async function api(path, body) {
  window.gpuplanBusy++;
  try { return await request(path, body); } finally { window.gpuplanBusy--; }
}

async function request(path, body) {
  const opts = body === undefined ? {} : {method: "POST", headers: {"Content-Type": "application/json"},
                                          body: JSON.stringify(body)};
  const r = await fetch(path, opts);
  const type = r.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await r.json() : await r.text();
  if (!r.ok) throw new Error(data && data.error ? data.error : `HTTP ${r.status}`);
  return data;
}
