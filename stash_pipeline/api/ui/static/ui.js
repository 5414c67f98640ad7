// The trace viewer's few behaviours; every page works without them.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Select every row on the page (the trace list, the review queue).
  const all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", () => {
      document.querySelectorAll("input.pick").forEach((box) => { box.checked = all.checked; });
    });
  }
  // "All N that match": the server acts on the search, not on the rows; tick them to show it.
  const matching = document.getElementById("select-matching");
  if (matching) {
    const say = () => {
      document.querySelectorAll("input.pick").forEach((box) => {
        if (matching.checked) { box.checked = true; }
        box.disabled = matching.checked;
      });
      document.getElementById("selection-count").textContent = matching.checked
        ? "Every trace that matches is selected, on every page." : "";
    };
    matching.addEventListener("change", say);
    say();
  }
  // Menus that apply at once (the trace page's evaluator).
  document.querySelectorAll("select.autosubmit").forEach((menu) => {
    menu.addEventListener("change", () => menu.form.submit());
  });
  reviewKeys();
  // Live progress: a queued or running model's page (or a page following its Score again
  // requests) asks where it stands until it ends, then reloads to show the result. A refused
  // request (signed out, gone) stops asking.
  const live = document.querySelector("[data-poll-url]");
  if (live) {
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
          if (badge) {
            badge.textContent = state.status;
            badge.className = `state state-${state.status}`;
          }
        }
      } catch (error) { /* the server is away for a moment: ask again */ }
      window.setTimeout(poll, every);
    };
    window.setTimeout(poll, every);
  }
});

// The review queue's keys (docs/viewer.md): j/k move the focus between the trace's actions,
// c opens the comment box on the action in focus, n marks the item done and goes on, x skips,
// a/r approve or reject a comparison, ? shows the keys. Keys typed into a field are the field's.
function reviewKeys() {
  const review = document.getElementById("review");
  if (!review) { return; }
  const actions = Array.from(review.querySelectorAll("#messages .action[data-action]"));
  const box = document.getElementById("review-comment");
  const text = document.getElementById("review-comment-text");
  const target = document.getElementById("review-comment-target");
  const help = document.getElementById("help");
  let index = actions.findIndex((el) => el.dataset.action === review.dataset.focus);
  const focusOn = (next, scroll = true) => {
    if (!actions.length) { return; }
    index = Math.max(0, Math.min(actions.length - 1, next));
    const element = actions[index];
    actions.forEach((el) => el.classList.remove("focus"));
    element.classList.add("focus");
    if (element.tagName === "DETAILS") { element.open = true; }
    if (scroll) { element.scrollIntoView({block: "center"}); }
    review.dataset.focus = element.dataset.action;
    if (target) { target.value = element.dataset.action; }
    const url = new URL(window.location.href);  // a reload keeps the place
    url.searchParams.set("focus", element.dataset.action);
    url.searchParams.delete("done");
    window.history.replaceState(null, "", url);
  };
  const openComment = () => {
    if (!box) { return; }
    box.hidden = false;
    if (target && review.dataset.focus) { target.value = review.dataset.focus; }
    text.focus();
  };
  const send = (id) => {
    const form = document.getElementById(id);
    if (form) { form.requestSubmit(); }
  };
  if (box && !text.value) { box.hidden = true; }
  actions.forEach((element, i) => element.addEventListener("click", () => focusOn(i, false)));
  review.querySelectorAll(".heatmap a.cell").forEach((cell) => {
    cell.addEventListener("click", () => {
      const i = actions.findIndex((el) => el.dataset.action === cell.dataset.action);
      if (i >= 0) { focusOn(i); }
    });
  });
  const opener = document.getElementById("comment-open");
  if (opener) { opener.addEventListener("click", openComment); }
  if (index >= 0) { focusOn(index); }
  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, textarea, select")) {
      if (event.target === text && event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        box.requestSubmit();
      } else if (event.target === text && event.key === "Escape") {
        box.hidden = true;
        text.blur();
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    const keys = {
      j: () => focusOn(index + 1), k: () => focusOn(index - 1), c: openComment,
      n: () => send("review-done"), x: () => send("review-skip"),
      a: () => send("review-approve"), r: () => send("review-reject"),
      "?": () => (help.open ? help.close() : help.showModal()),
    };
    if (keys[event.key]) {
      event.preventDefault();
      keys[event.key]();
    }
  });
}
