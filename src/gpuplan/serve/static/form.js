// The scenario form: the CLI's flags as fields (blank = not given), read back as the API's body.
"use strict";
const CAT = {gpus: [], models: [], fabrics: [], choices: {}};

const SCENARIO_GROUPS = [
  {title: "Model and training", fields: [
    {k: "model", label: "Model", kind: "model"},
    {k: "method", label: "Method", kind: "choice"},
    {k: "precision", label: "Precision", kind: "choice"},
    {k: "optimizer", label: "Optimizer", kind: "choice"},
    {k: "framework", label: "Framework", kind: "choice", more: true},
    {k: "kernels", label: "Kernels", kind: "choice", more: true},
    {k: "moe_dispatcher", label: "MoE expert exchange", kind: "choice", more: true},
    {k: "expandable_segments", label: "Allocator expandable segments", kind: "choice", more: true},
    {k: "seq_len", label: "Sequence length", ph: "4096"},
    {k: "global_batch", label: "Global batch (sequences)", ph: "per step"},
    {k: "tokens", label: "Tokens to train", ph: "e.g. 1.4T"},
    {k: "lora_rank", label: "LoRA rank", ph: "16", more: true},
    {k: "lora_dropout", label: "LoRA dropout", ph: "0", more: true},
    {k: "headroom", label: "Memory kept free", ph: "0.05 (share)", more: true},
  ]},
  {title: "Hardware", fields: [
    {k: "gpu", label: "GPU type", kind: "gpu"},
    {k: "gpus", label: "GPU count", ph: "1"},
    {k: "gpus_per_node", label: "GPUs per node", ph: "the GPU's node", more: true},
    {k: "scale_out", label: "Network between nodes", kind: "fabric"},
    {k: "price", label: "USD per GPU-hour", ph: "catalogue price", more: true},
  ]},
  {title: "Layout (blank: evaluate's default)", layout: true, fields: [
    {k: "tp", label: "Tensor parallel", ph: "1"}, {k: "pp", label: "Pipeline stages", ph: "1"},
    {k: "cp", label: "Context parallel", ph: "1", more: true}, {k: "ep", label: "Expert parallel", ph: "1", more: true},
    {k: "zero", label: "ZeRO / FSDP", kind: "choice"}, {k: "micro_batch", label: "Micro-batch", ph: "1"},
    {k: "recompute", label: "Recompute", kind: "choice"},
    {k: "pp_schedule", label: "Pipeline schedule", kind: "choice", more: true},
    {k: "virtual_stages", label: "Virtual stages", ph: "interleaved: 2", more: true},
    {k: "zero_group", label: "ZeRO group (hybrid)", ph: "all of dp", more: true},
    {k: "sequence_parallel", label: "Sequence parallel", kind: "choice", more: true},
    {k: "offload", label: "Offload", kind: "choice", more: true},
  ]},
];
const LAYOUT_KEYS = SCENARIO_GROUPS[2].fields.map(f => f.k);

function catalogueLists() {
  const models = h("datalist", {id: "model-list"});
  for (const m of CAT.models) {
    models.append(h("option", {value: m.id, label: `${m.name} · ${fmt.count(m.params)}`}));
    for (const a of m.aliases || []) models.append(h("option", {value: a, label: `${m.name} (alias)`}));
  }
  const gpus = h("datalist", {id: "gpu-list"}, h("option", {value: "all", label: "every catalogue type"}));
  for (const g of CAT.gpus) gpus.append(h("option", {value: g.id, label: g.name}));
  return [models, gpus];
}

class ScenarioForm {
  // prefix: URL key prefix (compare columns); gpuText: a free text GPU field ("a,b", "all"); compact: fewer fields
  constructor({prefix = "", gpuText = false, compact = false, layoutTitle} = {}) {
    this.prefix = prefix;
    this.inputs = {};
    this.listeners = [];
    this.el = h("form", {class: `scenario${compact ? " compact" : ""}`, onsubmit: e => e.preventDefault()});
    for (const g of SCENARIO_GROUPS) {
      const fs = h("fieldset", {}, h("legend", {}, g.layout && layoutTitle ? layoutTitle : g.title));
      for (const f of g.fields) {
        if (compact && f.more) continue;
        fs.append(this.field(f, gpuText));
      }
      this.el.append(fs);
    }
  }

  field(f, gpuText) {
    let input;
    const name = this.prefix + f.k;
    if (f.kind === "choice" || f.kind === "fabric" || (f.kind === "gpu" && !gpuText)) {
      input = h("select", {name});
      input.append(h("option", {value: ""}, f.kind === "gpu" ? "choose a GPU" : "default"));
      const opts = f.kind === "fabric" ? CAT.fabrics.filter(x => x.kind === "scale_out").map(x => [x.id, x.name])
                 : f.kind === "gpu" ? CAT.gpus.map(g => [g.id, `${g.name} (${fmt.gib(g.memory_bytes, 0)})`])
                 : (CAT.choices[f.k] || []).map(c => [String(c), String(c)]);
      for (const [v, t] of opts) input.append(h("option", {value: v}, t));
    } else {
      const list = f.kind === "model" ? "model-list" : f.kind === "gpu" ? "gpu-list" : null;
      input = h("input", {name, list, placeholder: f.kind === "model" ? "llama-3.1-70b, {params: 7e9}, a config.json"
                          : f.kind === "gpu" ? "h100-sxm · h100-sxm,h200 · all" : f.ph || "",
                          autocomplete: "off", spellcheck: "false"});
    }
    input.addEventListener("input", () => this.changed());
    input.addEventListener("change", () => this.changed());
    this.inputs[f.k] = input;
    const label = h("label", {}, h("span", {}, f.label), input);
    if (f.kind !== "model") return label;
    const paste = h("textarea", {rows: 5, placeholder: "paste a Hugging Face config.json here"});
    paste.addEventListener("input", () => {
      let text = paste.value.trim();
      try { text = JSON.stringify(JSON.parse(text)); } catch (e) { /* the server says what is wrong */ }
      input.value = text;
      this.changed();
    });
    return h("div", {class: "modelfield"}, label,
             h("details", {}, h("summary", {}, "paste a config.json"), paste));
  }

  onchange(fn) { this.listeners.push(fn); }
  changed() { for (const fn of this.listeners) fn(); }

  values() {
    const out = {};
    for (const [k, input] of Object.entries(this.inputs)) {
      const v = input.value.trim();
      if (v !== "") out[k] = v;
    }
    return out;
  }

  set(values, {quiet = false} = {}) {
    for (const [k, v] of Object.entries(values)) {
      const input = this.inputs[k];
      if (!input) continue;
      if (input.tagName === "SELECT" && v !== "" && ![...input.options].some(o => o.value === String(v))) {
        input.append(h("option", {value: String(v)}, String(v)));  // a value the lists do not hold: keep it
      }
      input.value = v == null ? "" : String(v);
    }
    if (!quiet) this.changed();
  }

  fromParams(params) {
    const vals = {};
    for (const k of Object.keys(this.inputs)) {
      const v = params.get(this.prefix + k);
      if (v != null) vals[k] = v;
    }
    this.set(vals, {quiet: true});
    return Object.keys(vals).length > 0;
  }

  toParams(params) {
    for (const [k, v] of Object.entries(this.values())) params.set(this.prefix + k, v);
  }
}

// the page's options beyond the scenario (plan: objective, deadline...), same URL handling
class OptionsForm {
  constructor(title, fields) {
    this.inputs = {};
    this.listeners = [];
    this.el = h("fieldset", {class: "options"}, h("legend", {}, title));
    for (const f of fields) {
      let input;
      if (f.choices) {
        input = h("select", {name: f.k});
        for (const c of f.choices) input.append(h("option", {value: c}, c));
      } else {
        input = h("input", {name: f.k, placeholder: f.ph || "", autocomplete: "off"});
      }
      for (const ev of ["input", "change"]) input.addEventListener(ev, () => this.listeners.forEach(fn => fn()));
      this.inputs[f.k] = input;
      this.el.append(h("label", {}, h("span", {}, f.label), input));
    }
  }
  onchange(fn) { this.listeners.push(fn); }
  values() { return ScenarioForm.prototype.values.call(this); }
  set(values) { return ScenarioForm.prototype.set.call(this, values, {quiet: true}); }
  fromParams(params) { this.prefix = ""; return ScenarioForm.prototype.fromParams.call(this, params); }
  toParams(params) { this.prefix = ""; ScenarioForm.prototype.toParams.call(this, params); }
}

function saveUrl(forms) {
  const params = new URLSearchParams();
  for (const f of forms) f.toParams(params);
  const q = params.toString();
  history.replaceState(null, "", q ? `?${q}` : location.pathname);
}

function debounce(fn, ms) {
  let t = null;
  return () => {
    if (t === null) window.gpuplanBusy++;
    else clearTimeout(t);
    t = setTimeout(() => { t = null; try { fn(); } finally { window.gpuplanBusy--; } }, ms);
  };
}

function errorBox(message) {
  return h("div", {class: "error", role: "alert"}, h("b", {}, "gpuplan: error: "), h("span", {class: "msg"}, message));
}

// download buttons: the answer on the page as JSON, and the --report document (md, html) for the same body
function downloads(getBody, kind, name, getResult) {
  const reportBody = fmtName => Object.assign({kind, format: fmtName}, getBody());
  const run = async (btn, fn) => {
    btn.disabled = true;
    try { await fn(); } catch (e) { alert(e.message); } finally { btn.disabled = false; }
  };
  return h("div", {class: "downloads"},
    h("button", {type: "button", onclick: () => download(`${name}.json`, JSON.stringify(getResult(), null, 2),
      "application/json")}, "Download JSON"),
    h("button", {type: "button", onclick: e => run(e.target, async () => download(`${name}.md`,
      await api("/api/report", reportBody("md")), "text/markdown"))}, "Report (.md)"),
    h("button", {type: "button", onclick: e => run(e.target, async () => download(`${name}.html`,
      await api("/api/report", reportBody("html")), "text/html"))}, "Report (.html)"));
}

// the plan's best layout on exactly n GPUs (the scaling curve holds the best at each count it tried)
async function bestOn(body, n) {
  const res = await api("/api/plan", Object.assign({}, body, {gpus: String(n), max_gpus: String(n), top: "1"}));
  const at = (res.scaling || []).find(p => p.gpus === n);
  if (at) return at.best;
  if (res.best && res.best.scenario.hardware.gpus === n) return res.best;
  throw new Error(`no layout fits on ${n} GPUs` + (res.best ? ` (the plan's best uses ${res.best.scenario.hardware.gpus})` : ""));
}
