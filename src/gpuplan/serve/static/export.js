// Export: the chosen layout as a framework's launch config, with copy and download.
"use strict";

const EXPORT_OPTIONS = [
  // slurm, kubernetes, skypilot: the scheduler's job starting the scenario framework's config (else torchrun)
  {k: "to", label: "Target", choices: ["torchtitan", "deepspeed", "accelerate", "megatron", "torchrun", "slurm",
                                       "kubernetes", "skypilot"]},
  {k: "objective", label: "When the layout is open, best by", choices: ["time", "cost"]},
  {k: "max_gpus", label: "Largest GPU count planned", ph: "16384"},
];

function initExport(main) {
  const form = new ScenarioForm({layoutTitle: "Layout (tp and pp blank: planned)"});
  const opts = new OptionsForm("Export", EXPORT_OPTIONS);
  const out = h("div", {class: "results", "aria-live": "polite"});
  const status = h("div", {class: "status"});
  let seq = 0;
  const run = async () => {
    saveUrl([form, opts]);
    const b = Object.assign(form.values(), opts.values());
    if (!b.model || !b.gpu) { out.replaceChildren(h("p", {class: "hint"}, "Choose a model and a GPU type.")); return; }
    const mine = ++seq;
    status.textContent = "…";
    try {
      const ex = await api("/api/export", b);
      if (mine !== seq) return;
      const code = h("pre", {class: "code", "data-filename": ex.filename}, ex.text);
      const copy = h("button", {type: "button", onclick: async () => {
        try { await navigator.clipboard.writeText(ex.text); copy.textContent = "Copied"; }
        catch (e) { getSelection().selectAllChildren(code); copy.textContent = "Selected: press Ctrl-C"; }
        setTimeout(() => { copy.textContent = "Copy"; }, 1500);
      }}, "Copy");
      out.replaceChildren(h("section", {class: "card"},
        h("h2", {}, `${ex.target}: ${ex.filename}`), h("p", {class: "why"}, ex.layout_from),
        ex.notes.length ? h("div", {class: "notes"}, h("h3", {}, "what the target cannot express"),
                            h("ul", {}, ex.notes.map(n => h("li", {}, n)))) : null,
        h("div", {class: "downloads"}, copy, h("button", {type: "button",
          onclick: () => download(ex.filename, ex.text, "text/plain")}, `Download ${ex.filename}`)),
        code));
    } catch (e) {
      if (mine === seq) out.replaceChildren(errorBox(e.message));
    } finally { if (mine === seq) status.textContent = ""; }
  };
  form.onchange(debounce(run, 400));
  opts.onchange(run);
  const params = new URLSearchParams(location.search);
  if (!form.fromParams(params)) form.set({model: "llama-3.1-8b", gpu: "h100-sxm", gpus: "16", tp: "1", pp: "1", zero: "3"},
                                          {quiet: true});
  opts.fromParams(params);
  main.append(h("div", {class: "layout2"}, h("aside", {}, opts.el, form.el, status), out));
  run();
}
