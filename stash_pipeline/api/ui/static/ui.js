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
  // Live progress: a queued or running model's page asks for its progress until the model
  // ends, then reloads to show the result. A refused request (signed out, gone) stops asking.
  const live = document.getElementById("live");
  if (live && live.dataset.pollUrl) {
    const every = 1000 * Number(live.dataset.pollSeconds || 2);
    const badge = document.getElementById("model-status");
    const poll = async () => {
      try {
        const response = await fetch(live.dataset.pollUrl, {headers: {Accept: "application/json"}});
        if (response.status === 401 || response.status === 404) { return; }
        if (response.ok) {
          const state = await response.json();
          if (!state.live) { window.location.reload(); return; }
          document.getElementById("progress").textContent = state.text;
          document.getElementById("live-status").textContent = state.status;
          badge.textContent = state.status;
          badge.className = `state state-${state.status}`;
        }
      } catch (error) { /* the server is away for a moment: ask again */ }
      window.setTimeout(poll, every);
    };
    window.setTimeout(poll, every);
  }
});
