// Size a run: evaluate what the form says, as the fields change.
"use strict";

const MEMORY_PARTS = [["weights", "weights", "#3b6fb6"], ["gradients", "gradients", "#6c9fb8"],
  ["optimizer", "optimizer states", "#e08a2c"], ["activations", "activations", "#4e9a5b"],
  ["other", "other (logits, buffers, runtime, fragmentation)", "#937860"]];
const TIME_PARTS = [["compute_s", "compute", "#3b6fb6"], ["comm_exposed_s", "exposed communication", "#c44e52"],
  ["bubble_s", "pipeline bubble", "#8172b2"], ["optimizer_s", "optimizer step", "#e08a2c"]];

function assumedList(est) {
  // every "assumed" the answer carries (top level, model, ...), as given: text, or records (field, value, rule)
  const out = [];
  const walk = obj => {
    if (!obj || typeof obj !== "object") return;
    for (const [k, v] of Object.entries(obj)) {
      if (k === "assumed") {
        if (Array.isArray(v)) out.push(...v);
        else if (v && typeof v === "object") Object.entries(v).forEach(([a, b]) => out.push({field: a, value: b}));
      } else if (k !== "scenario" && v && typeof v === "object" && !Array.isArray(v)) walk(v);
    }
  };
  walk(est);
  return {assumed: out, notes: est.notes || []};
}

function cell(v) {
  return v === null ? "null" : typeof v === "object" ? JSON.stringify(v) : String(v);
}

function assumedView(items) {
  const texts = items.filter(x => typeof x !== "object" || x === null).map(cell);
  const records = items.filter(x => x && typeof x === "object");
  const cols = [...new Set(records.flatMap(r => Object.keys(r)))];
  return h("details", {class: "assumed", open: true},
    h("summary", {}, `assumed (${items.length}): what the input left open, and the rule that filled it`),
    texts.length ? h("ul", {}, texts.map(t => h("li", {}, t))) : null,
    records.length ? h("table", {class: "assumed-table"}, h("tr", {}, cols.map(c => h("th", {}, c))),
      records.map(r => h("tr", {}, cols.map(c => h("td", {}, c in r ? cell(r[c]) : ""))))) : null);
}

// " (80%: a–b)" for a quantity's interval (DESIGN.md §4: section.interval[key] = {p10, p90}), "" without one
function span(section, key, f) {
  const iv = section && section.interval && section.interval[key];
  return iv && iv.p10 != null && iv.p10 !== iv.p90 ? ` (80%: ${f(iv.p10)}–${f(iv.p90)})` : "";
}

function memoryView(est) {
  const m = est.memory;
  const keep = get(est, "scenario.training.headroom") ?? get(est, "memory.headroom_share");
  const segs = MEMORY_PARTS.map(([k, label, color]) => ({label, short: label.split(" (")[0], value: m[k] || 0, color}));
  const peak = fmt.gib(m.total) + span(m, "total", fmt.gib);
  const head = m.fits
    ? `fits: ${peak} of ${fmt.gib(m.capacity)} per GPU, ${fmt.gib(m.headroom)} free`
    : m.tight ? `TIGHT: ${peak} of ${fmt.gib(m.capacity)} per GPU — the interval's upper end is over the usable ` +
                `${fmt.gib(m.usable)}: it may run, and it may not`
    : `does NOT fit: ${peak} needed of ${fmt.gib(m.capacity)} per GPU (${fmt.gib(m.total - m.capacity)} over)`;
  return h("section", {class: "card"},
    h("h2", {class: m.fits ? "ok" : m.tight ? "warn" : "bad", "data-key": "memory.fits", "data-value": String(m.fits)},
      head),
    stackBar({segments: segs, capacity: m.capacity, keep: typeof keep === "number" && keep < 1 ? keep : null,
              format: v => fmt.gib(v), title: "memory per GPU, most loaded rank"}),
    h("div", {class: "metrics"},
      ...MEMORY_PARTS.map(([k, label]) => metric(label.split(" (")[0], `memory.${k}`, m[k], fmt.gib(m[k]))),
      metric("total", "memory.total", m.total, fmt.gib(m.total)),
      metric("PyTorch reserved", "memory.reserved", m.reserved, fmt.gib(m.reserved)),
      metric("PyTorch allocated", "memory.allocated", m.allocated, fmt.gib(m.allocated)),
      metric("capacity", "memory.capacity", m.capacity, fmt.gib(m.capacity)),
      metric("headroom", "memory.headroom", m.headroom, fmt.gib(m.headroom)),
      m.peak_phase ? metric("peak in", "memory.peak_phase", m.peak_phase, m.peak_phase) : null));
}

function timeView(est) {
  const t = est.time, c = est.cost;
  const segs = TIME_PARTS.map(([k, label, color]) => ({label, value: t[k] || 0, color}));
  const rest = t.step_s - segs.reduce((s, x) => s + x.value, 0);
  if (rest > t.step_s * 1e-6) segs.push({label: "other", value: rest, color: "#b8b14f"});
  return h("section", {class: "card"},
    h("h2", {}, `step ${fmt.dur(t.step_s)} · ${fmt.int(t.tokens_per_s)} tokens/s · MFU ${fmt.pct(t.mfu)}` +
      span(t, "mfu", fmt.pct)),
    stackBar({segments: segs, format: fmt.dur, title: "step time"}),
    h("div", {class: "metrics"},
      metric("step time", "time.step_s", t.step_s, fmt.dur(t.step_s)),
      metric("tokens/s", "time.tokens_per_s", t.tokens_per_s, fmt.int(t.tokens_per_s)),
      metric("tokens/s per GPU", "time.tokens_per_s_per_gpu", t.tokens_per_s_per_gpu,
             fmt.int(t.tokens_per_s_per_gpu) + span(t, "tokens_per_s_per_gpu", fmt.int)),
      metric("MFU", "time.mfu", t.mfu, fmt.pct(t.mfu), "model FLOPs / peak"),
      metric("HFU", "time.hfu", t.hfu, fmt.pct(t.hfu), "with recomputation"),
      metric("time to train", "time.train_s", t.train_s,
             t.train_s == null ? "give tokens or steps" : fmt.dur(t.train_s) + span(t, "train_s", fmt.dur)),
      metric("GPU-hours", "time.gpu_hours", t.gpu_hours,
             t.gpu_hours == null ? "–" : fmt.int(t.gpu_hours) + span(t, "gpu_hours", fmt.int)),
      metric("cost", "cost.usd", c.usd, c.usd == null ? "–" : fmt.usd(c.usd) + span(c, "usd", fmt.usd)),
      metric("USD per GPU-hour", "cost.usd_per_gpu_hour", c.usd_per_gpu_hour, fmt.usd(c.usd_per_gpu_hour))));
}

function scenarioView(est) {
  const sc = est.scenario, hw = sc.hardware, tr = sc.training, m = est.model;
  const {assumed, notes} = assumedList(est);
  return h("section", {class: "card"},
    h("h2", {}, "what was computed"),
    h("dl", {class: "facts"},
      h("dt", {}, "model"), h("dd", {}, `${m.name}: ${fmt.count(m.params)} parameters` +
        (m.params_active !== m.params ? `, ${fmt.count(m.params_active)} active` : "")),
      h("dt", {}, "hardware"), h("dd", {}, `${hw.gpus}× ${hw.gpu} (${hw.nodes} node${hw.nodes > 1 ? "s" : ""} of ` +
        `${hw.gpus_per_node}), ${hw.scale_up} inside, ${hw.scale_out || "–"} between nodes`),
      h("dt", {}, "training"), h("dd", {}, `${tr.method}, ${tr.precision}, ${tr.optimizer}, seq ${tr.seq_len}` +
        (tr.global_batch ? `, batch ${tr.global_batch}` : "") + (tr.tokens ? `, ${fmt.count(tr.tokens)} tokens` : "")),
      h("dt", {}, "layout"), h("dd", {"data-key": "layout"}, layoutText(sc.layout))),
    assumed.length ? assumedView(assumed) : null,
    notes.length ? h("div", {class: "notes"}, h("h3", {}, "notes"), h("ul", {}, notes.map(a => h("li", {}, a)))) : null);
}

function initSize(main) {
  const form = new ScenarioForm();
  const out = h("div", {class: "results", "aria-live": "polite"});
  const status = h("div", {class: "status"});
  let last = null, seq = 0;
  const body = () => form.values();
  const fill = async (kind, btn) => {
    btn.disabled = true;
    status.textContent = kind === "fit" ? "finding the fewest GPUs…" : "searching layouts…";
    try {
      const b = body();
      if (kind === "fit") for (const k of [...LAYOUT_KEYS, "gpus"]) delete b[k];
      const best = kind === "plan" ? await bestOn(b, parseInt(b.gpus || "1", 10)) : (await api("/api/fit", b)).best;
      if (!best) throw new Error("nothing fits on any count tried: see the Plan page");
      const lay = best.scenario.layout;
      const vals = {gpus: best.scenario.hardware.gpus};
      for (const k of LAYOUT_KEYS) vals[k] = lay[k];
      form.set(vals);
      status.textContent = "";
    } catch (e) { status.textContent = ""; out.replaceChildren(errorBox(e.message)); }
    finally { btn.disabled = false; }
  };
  const tools = h("div", {class: "tools"},
    h("button", {type: "button", onclick: e => fill("fit", e.target),
                 title: "gpuplan fit: the smallest GPU count that fits, and its layout"}, "Fewest GPUs that fit"),
    h("button", {type: "button", onclick: e => fill("plan", e.target),
                 title: "gpuplan plan with the GPU count fixed: the fastest layout"}, "Best layout for this count"));
  const run = async () => {
    saveUrl([form]);
    const b = body();
    if (!b.model || !b.gpu) { out.replaceChildren(h("p", {class: "hint"}, "Choose a model and a GPU type.")); return; }
    const mine = ++seq;
    status.textContent = "…";
    try {
      const est = await api("/api/evaluate", b);
      if (mine !== seq) return;
      last = est;
      out.replaceChildren(memoryView(est), timeView(est), scenarioView(est),
                          downloads(body, "evaluate", "gpuplan-evaluate", () => last));
    } catch (e) {
      if (mine === seq) out.replaceChildren(errorBox(e.message));
    } finally { if (mine === seq) status.textContent = ""; }
  };
  form.onchange(debounce(run, 250));
  if (!form.fromParams(new URLSearchParams(location.search))) form.set({model: "llama-3.1-8b", gpu: "h100-sxm", gpus: "8", zero: "3", tokens: "1T", global_batch: "1024"},
                                                                   {quiet: true});
  main.append(h("div", {class: "layout2"}, h("aside", {}, form.el, tools, status), out));
  run();
}
