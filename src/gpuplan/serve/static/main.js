// Load the catalogues once, then build the page the server named (body data-page).
"use strict";

async function start() {
  const main = document.getElementById("app");
  try {
    [CAT.gpus, CAT.models, CAT.fabrics] = await Promise.all(["gpus", "models", "fabrics"].map(n => api(`/api/${n}`)));
    CAT.choices = JSON.parse(document.body.dataset.choices || "{}");
  } catch (e) {
    main.replaceChildren(errorBox(`cannot read the catalogues: ${e.message}`));
    return;
  }
  main.replaceChildren(...catalogueLists());
  const pages = {size: initSize, plan: initPlan, compare: initCompare, export: initExport};
  pages[document.body.dataset.page](main);
}

document.addEventListener("DOMContentLoaded", start);
