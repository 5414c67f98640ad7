// The trace viewer's few behaviours; every page works without them.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Select every trace on the page for Create new reward model.
  const all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", () => {
      document.querySelectorAll("input.pick").forEach((box) => { box.checked = all.checked; });
    });
  }
  // Menus that apply at once (the trace page's evaluator).
  document.querySelectorAll("select.autosubmit").forEach((menu) => {
    menu.addEventListener("change", () => menu.form.submit());
  });
  // Score again with the personal model chosen in the menu.
  const scoreModel = document.getElementById("score-model");
  const scoreButton = document.getElementById("score-again");
  if (scoreModel && scoreButton && scoreModel.dataset.actionTemplate) {
    const point = () => {
      scoreButton.formAction = scoreModel.dataset.actionTemplate.replace(
        "ID", encodeURIComponent(scoreModel.value));
    };
    scoreModel.addEventListener("change", point);
    point();
  }
  // Live progress: a queued or running model's page reloads until it is done.
  const live = document.querySelector("[data-refresh]");
  if (live) {
    window.setTimeout(() => window.location.reload(), 1000 * Number(live.dataset.refresh));
  }
});
