// Plan: search GPU type × count × layout; the scaling curve, the Pareto frontier, the candidates.
"use strict";

const PLAN_OPTIONS = [
  {k: "objective", label: "Rank by", choices: ["time", "cost"]},
  {k: "deadline", label: "Deadline", ph: "e.g. 30d"},
  {k: "budget", label: "Budget (USD)", ph: "e.g. 250000"},
  {k: "max_gpus", label: "Largest GPU count", ph: "16384"},
  {k: "top", label: "Candidates shown", ph: "5"},
  {k: "threshold", label: "Equilibrium threshold", ph: "0.8"},
  {k: "provider", label: "Provider", ph: "any (e.g. aws,gcp)"},
  {k: "region", label: "Region", ph: "any (e.g. eu, us-east-1)"},
  {k: "pricing", label: "Pricing", choices: ["", "on-demand", "spot", "reserved"]},
];

function candidateRow(e, i) {
  const t = e.time, hw = e.scenario.hardware;
  return h("tr", {}, h("td", {}, String(i + 1)), h("td", {}, `${hw.gpus}× ${hw.gpu}`),
    h("td", {class: "lay"}, layoutText(e.scenario.layout)), h("td", {}, fmt.dur(t.train_s)),
    h("td", {}, fmt.usd(e.cost.usd)), h("td", {}, fmt.int(t.tokens_per_s_per_gpu)), h("td", {}, fmt.pct(t.mfu)),
    h("td", {}, `${fmt.gib(e.memory.total)} / ${fmt.gib(e.memory.capacity, 0)}`));
}

function marketText(m) {  // where the price is from (report/text.py market_line)
  const old = m.stale ? ` — ${m.age_days} days old: check the provider's page` : "";
  let t = `priced: ${m.pricing.replace("_", "-")} on ${m.provider} ${m.region} (${m.geo}) at ` +
          `$${m.usd_per_gpu_hour.toFixed(2)}/GPU-h, list price of ${m.date}${old}`;
  if (m.preemption_overhead != null)
    t += `; spot capacity is preemptible: +${(m.preemption_overhead * 100).toFixed(1)}% wall time for preemptions ` +
         "(checkpoints, lost work, restarts) is included in the time and cost";
  return t;
}

function scalingView(res) {
  const eq = res.equilibrium || {};
  const pts = res.scaling.map(p => ({x: p.gpus, y: p.best.time.tokens_per_s,
    title: `${p.gpus} GPUs: ${fmt.int(p.best.time.tokens_per_s)} tokens/s, efficiency ${fmt.pct(p.efficiency, 0)}\n${layoutText(p.best.scenario.layout)}`}));
  const at = n => pts.find(p => p.x === n);
  const marks = [];
  const first = pts[0];
  if (first) marks.push({x: first.x, y: first.y, kind: "smallest", label: `smallest fit: ${first.x}`, dy: 18});
  if (eq.gpus && at(eq.gpus)) marks.push({x: eq.gpus, y: at(eq.gpus).y, kind: "equilibrium",
                                          label: `equilibrium: ${eq.gpus} GPUs`, title: eq.why});
  const perNode = res.scaling.length ? res.scaling[0].best.scenario.hardware.gpus_per_node : null;
  const note = perNode && first && first.x > perNode ? `every count spans nodes (${perNode} GPUs per node)` : null;
  const chart = lineChart({points: pts, marks, ideal: true, xlabel: `${eq.gpu || ""} GPUs (log scale)`, note,
                           ylabel: "tokens/s (log scale)", yfmt: v => fmt.count(v, 1),
                           vlines: perNode ? [{x: perNode, label: `node boundary (${perNode})`, kind: "node"}] : []});
  return h("section", {class: "card"}, h("h2", {}, "scaling curve"), chart,
           h("p", {class: "why", "data-key": "equilibrium.gpus", "data-value": String(eq.gpus)}, eq.why || ""));
}

function durationTicks(lo, hi) {  // round days (or hours, seconds) on the time axis
  const unit = hi > 2 * 86400 ? 86400 : hi > 7200 ? 3600 : 1;
  return logTicks(lo / unit, hi / unit).map(t => t * unit);
}

function paretoView(res) {
  const detail = h("div", {class: "detail"}, "Click a point to see its layout.");
  const box = h("div", {});
  const draw = sel => {
    const pts = res.pareto.map((p, i) => ({x: p.train_s, y: p.usd, onclick: () => draw(i),
      title: `${p.gpus}× ${p.gpu}: ${fmt.dur(p.train_s)}, ${fmt.usd(p.usd)}`}));
    box.replaceChildren(scatter({points: pts, selected: sel, xlabel: "time to train", ylabel: "cost (USD)",
                                 xfmt: fmt.dur, yfmt: v => `$${fmt.count(v, 1)}`,
                                 xticks: durationTicks}));
    if (sel != null) {
      const p = res.pareto[sel];
      detail.replaceChildren(h("b", {}, `${p.gpus}× ${p.gpu}`), ` — ${layoutText(p.layout)} — ${fmt.dur(p.train_s)}, `
        + `${fmt.usd(p.usd)}, ${fmt.int(p.tokens_per_s)} tokens/s`);
    }
  };
  draw(null);
  return h("section", {class: "card"}, h("h2", {}, `time/cost Pareto frontier (${res.pareto.length} plans)`), box, detail);
}

function rejectedView(res) {
  const rows = Object.entries(res.rejected).sort((a, b) => b[1] - a[1]);
  const miss = res.closest_miss;
  return h("section", {class: "card"}, h("h2", {}, `searched ${fmt.int(res.searched)} configurations`),
    h("table", {class: "rej"}, h("tr", {}, h("th", {}, "rejected because"), h("th", {}, "layouts")),
      rows.map(([why, n]) => h("tr", {}, h("td", {}, why), h("td", {class: "num"}, fmt.int(n))))),
    miss ? h("p", {}, h("b", {}, "closest miss: "), `${miss.gpus}× ${miss.gpu}, ${layoutText(miss.layout)}: `
      + `${fmt.gib(miss.total)} of ${fmt.gib(miss.capacity)} (${fmt.gib(miss.over_bytes)} over; most is ${miss.largest})`) : null);
}

function planView(res) {
  const best = res.best;
  if (!best) {
    const gap = res.no_split;
    const head = gap ? `no layout of ${fmt.int(gap.gpus)} GPUs splits ${fmt.int(gap.global_batch)} sequences`
      : "nothing fits";
    return [h("section", {class: "card"}, h("h2", {class: "bad"}, head),
            h("ul", {class: "advice"}, (res.advice || []).map(a => h("li", {}, a)))), rejectedView(res)];
  }
  const hw = best.scenario.hardware, t = best.time;
  return [
    h("section", {class: "card"},
      h("h2", {class: "ok"}, `best: ${hw.gpus}× ${hw.gpu} — ${fmt.dur(t.train_s)}${span(t, "train_s", fmt.dur)}, ` +
        `${fmt.usd(best.cost.usd)}${span(best.cost, "usd", fmt.usd)}`),
      h("div", {class: "metrics"},
        metric("GPUs", "best.scenario.hardware.gpus", hw.gpus, `${hw.gpus}× ${hw.gpu}`),
        metric("layout", "best.layout", "", layoutText(best.scenario.layout)),
        metric("time to train", "best.time.train_s", t.train_s, fmt.dur(t.train_s)),
        metric("cost", "best.cost.usd", best.cost.usd, fmt.usd(best.cost.usd)),
        metric("MFU", "best.time.mfu", t.mfu, fmt.pct(t.mfu)),
        metric("memory per GPU", "best.memory.total", best.memory.total,
               `${fmt.gib(best.memory.total)} / ${fmt.gib(best.memory.capacity, 0)}`)),
      best.cost.market ? h("p", {class: "why", "data-key": "best.cost.market.provider",
                                 "data-value": best.cost.market.provider}, marketText(best.cost.market)) : null,
      res.recommendation ? h("p", {class: "why", "data-key": "recommendation.rule",
                                   "data-value": res.recommendation.rule},
                             `why this one: ${res.recommendation.text}` +
                             (res.recommendation.space ? ` (${res.recommendation.space})` : "")) : null,
      (res.advice || []).length ? h("ul", {class: "advice"}, res.advice.map(a => h("li", {}, a))) : null),
    scalingView(res), paretoView(res),
    h("section", {class: "card"}, h("h2", {}, "top candidates"),
      h("table", {class: "cands"}, h("tr", {}, ["#", "GPUs", "layout", "time", "cost", "tok/s/GPU", "MFU", "memory"]
        .map(x => h("th", {}, x))), res.candidates.map(candidateRow))),
    rejectedView(res)];
}

function initPlan(main) {
  const form = new ScenarioForm({gpuText: true, layoutTitle: "Layout (blank: searched)"});
  form.inputs.gpus.placeholder = "searched";
  const opts = new OptionsForm("Search", PLAN_OPTIONS);
  const out = h("div", {class: "results", "aria-live": "polite"});
  const status = h("div", {class: "status"});
  let last = null, seq = 0;
  const body = () => Object.assign(form.values(), opts.values());
  const go = h("button", {type: "submit", class: "primary"}, "Plan");
  // plans as you type: every change re-plans after a short pause; an answer that a later change has
  // overtaken is dropped (the server answers the newest request as it answers any other)
  const run = async () => {
    saveUrl([form, opts]);
    const b = body();
    if (!b.model || !b.gpu) { out.replaceChildren(h("p", {class: "hint"}, "Choose a model and GPU types.")); return; }
    const mine = ++seq;
    const t0 = performance.now();
    status.textContent = "planning…";
    try {
      const res = await api("/api/plan", b);
      if (mine !== seq) return;
      last = res;
      out.replaceChildren(...planView(last), downloads(body, "plan", "gpuplan-plan", () => last));
      status.textContent = `planned in ${((performance.now() - t0) / 1000).toFixed(2)} s`;
    } catch (e) {
      if (mine !== seq) return;
      out.replaceChildren(errorBox(e.message));
      status.textContent = "";
    }
  };
  const later = debounce(run, 300);
  form.onchange(later);
  opts.onchange(later);
  const f = h("form", {class: "planform", onsubmit: e => { e.preventDefault(); run(); }}, form.el, opts.el, go, status);
  const given = form.fromParams(new URLSearchParams(location.search));
  opts.fromParams(new URLSearchParams(location.search));
  if (!given) form.set({model: "llama-3.1-70b", gpu: "h100-sxm", tokens: "1T", global_batch: "1024"}, {quiet: true});
  main.append(h("div", {class: "layout2"}, h("aside", {}, f), out));
  run();
}
