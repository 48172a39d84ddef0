// Compare: two to four configurations side by side (e.g. 128 GPUs on 10 GbE vs 32 on InfiniBand).
"use strict";

const COMPARE_ROWS = [
  ["fits", e => e.memory.fits ? "yes" : "NO", null],
  ["GPUs", e => `${e.scenario.hardware.gpus}× ${e.scenario.hardware.gpu}`, null],
  ["network between nodes", e => e.scenario.hardware.scale_out || "–", null],
  ["layout", e => layoutText(e.scenario.layout), null],
  ["memory per GPU", e => `${fmt.gib(e.memory.total)} / ${fmt.gib(e.memory.capacity, 0)}`, e => e.memory.total],
  ["step time", e => fmt.dur(e.time.step_s), e => e.time.step_s],
  ["exposed communication", e => fmt.dur(e.time.comm_exposed_s), e => e.time.comm_exposed_s],
  ["tokens/s", e => fmt.int(e.time.tokens_per_s), e => -e.time.tokens_per_s],
  ["MFU", e => fmt.pct(e.time.mfu), e => -e.time.mfu],
  ["time to train", e => fmt.dur(e.time.train_s), e => e.time.train_s],
  ["GPU-hours", e => fmt.int(e.time.gpu_hours), e => e.time.gpu_hours],
  ["cost", e => fmt.usd(e.cost.usd), e => e.cost.usd],
];
const COMPARE_DEFAULT = [
  {model: "llama-3.1-70b", gpu: "h100-sxm", gpus: "128", scale_out: "eth-10g", tokens: "1T", global_batch: "1024"},
  {model: "llama-3.1-70b", gpu: "h100-sxm", gpus: "32", scale_out: "ib-ndr-400g", tokens: "1T", global_batch: "1024"},
];

function compareTable(results) {
  const head = h("tr", {}, h("th", {}, ""), results.map((_, i) => h("th", {}, `configuration ${i + 1}`)));
  const rows = COMPARE_ROWS.map(([label, show, rank]) => {
    const ok = results.filter(r => !r.error && r.memory.fits && (!rank || rank(r) != null));
    const bestVal = rank && ok.length > 1 ? Math.min(...ok.map(rank)) : null;
    return h("tr", {}, h("th", {}, label), results.map(r => r.error ? h("td", {class: "err"}, "–")
      : h("td", {class: rank && bestVal != null && r.memory.fits && rank(r) === bestVal ? "best" : null}, show(r))));
  });
  const errs = h("tr", {}, h("th", {}, ""), results.map(r => h("td", {}, r.error ? errorBox(r.error) : "")));
  return h("table", {class: "compare"}, head, rows, results.some(r => r.error) ? errs : null);
}

function initCompare(main) {
  const cols = h("div", {class: "columns"});
  const out = h("div", {class: "results", "aria-live": "polite"});
  const status = h("div", {class: "status"});
  const mode = h("select", {name: "search"}, h("option", {value: "best"}, "searched: the best layout on each column's GPUs"),
                 h("option", {value: "given"}, "as given: blanks take evaluate's defaults"));
  let forms = [], last = null;
  const params = new URLSearchParams(location.search);
  if (params.get("search")) mode.value = params.get("search");
  const bodies = () => forms.map(f => f.values());
  const run = async () => {
    saveUrl([...forms, {toParams: p => p.set("search", mode.value)}]);
    status.textContent = "…";
    try {
      let results;
      if (mode.value === "given") {
        results = await api("/api/evaluate", bodies());
      } else {  // one plan per column, its GPU count fixed: the best layout there
        results = await Promise.all(bodies().map(b => bestOn(b, parseInt(b.gpus || "1", 10)).catch(
          e => ({error: e.message}))));
      }
      last = results;
      out.replaceChildren(compareTable(results), h("div", {class: "downloads"}, h("button", {type: "button",
        onclick: () => download("gpuplan-compare.json", JSON.stringify(last, null, 2), "application/json")}, "Download JSON")));
    } catch (e) { out.replaceChildren(errorBox(e.message)); }
    status.textContent = "";
  };
  const later = debounce(run, 400);
  const add = vals => {
    if (forms.length >= 4) return;
    const f = new ScenarioForm({prefix: `${forms.length + 1}.`, compact: true, layoutTitle: "Layout (blank: see above)"});
    if (vals) f.set(vals, {quiet: true});
    f.onchange(later);
    forms.push(f);
    draw();
  };
  const draw = () => {
    cols.replaceChildren(...forms.map((f, i) => h("div", {class: "col"}, h("h2", {}, `configuration ${i + 1}`,
      forms.length > 2 ? h("button", {type: "button", class: "x", title: "remove",
                                      onclick: () => { forms.splice(i, 1); relabel(); draw(); later(); }}, "×") : null), f.el)));
    addBtn.disabled = forms.length >= 4;
  };
  const relabel = () => forms.forEach((f, i) => { f.prefix = `${i + 1}.`; });
  const addBtn = h("button", {type: "button", onclick: () => { add(forms[forms.length - 1].values()); later(); }}, "+ add a configuration");
  mode.addEventListener("change", run);
  for (let i = 1; i <= 4; i++) {
    const f = new ScenarioForm({prefix: `${i}.`, compact: true, layoutTitle: "Layout (blank: see above)"});
    if (f.fromParams(params)) { f.onchange(later); forms.push(f); }
  }
  if (forms.length < 2) { forms = []; COMPARE_DEFAULT.forEach(v => add(v)); }
  draw();
  main.append(h("div", {class: "bar"}, h("label", {}, h("span", {}, "Layout blanks "), mode), addBtn, status), cols, out);
  run();
}
