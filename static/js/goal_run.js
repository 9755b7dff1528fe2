// A goal run's page: while the run goes on, ask the server for its state about every two seconds and redraw the
// live part (status, limits and usage, iterations); show the answer box while the run waits for this user, and
// hide Stop once the run has ended. Kept out of the markup so that the Content-Security-Policy allows no inline
// script.
(function () {
  "use strict";
  const live = document.getElementById("goal-live");
  if (!live) return;
  const url = live.dataset.stateUrl;
  const answer = document.getElementById("goal-answer");
  const question = document.getElementById("goal-question");
  const stop = document.getElementById("goal-stop");
  const INTERVAL = 2000;
  const MAX_INTERVAL = 20000;
  let delay = INTERVAL;
  let lastHtml = null;

  function apply(state) {
    if (state.html !== lastHtml) {
      live.innerHTML = state.html; // rendered by the server's template (escaped there)
      lastHtml = state.html;
    }
    if (answer) {
      const wasHidden = answer.hidden;
      answer.hidden = !state.waiting;
      if (question && state.waiting) question.textContent = state.question;
      if (wasHidden && state.waiting) {
        const box = answer.querySelector("textarea");
        if (box) box.focus();
      }
    }
    if (stop) stop.hidden = !state.active;
  }

  async function poll() {
    let state;
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      state = await response.json();
      delay = INTERVAL;
    } catch (error) {
      delay = Math.min(delay * 2, MAX_INTERVAL); // the server is busy or gone: ask less often
      window.setTimeout(poll, delay);
      return;
    }
    apply(state);
    if (state.active) window.setTimeout(poll, delay);
  }

  if (live.dataset.active === "1") window.setTimeout(poll, INTERVAL);
})();
