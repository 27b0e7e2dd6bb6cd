// One lock's page (/ui/locks/<name>): the lock now, its recent runs (chart and table), skips in the last 24 hours,
// and force-release behind a dialog that asks for a reason.

import { api, dbNow, lockPath } from "./api.js";
import { drawChart } from "./chart.js";
import {
  $,
  countDown,
  fill,
  formatDuration,
  formatTime,
  setHolder,
  setState,
  setStatus,
  setTime,
  tick,
} from "./format.js";

/** The page of one lock: now, its runs, its skips; ``session()`` says whether the token may force-release. */
export function lockPage(session) {
  const name = document.body.dataset.lock;
  const runRows = $("run-rows");
  let runs = [];
  let cursor = null;
  let lock = null;

  function note(text) {
    $("lock-note").textContent = text;
    $("lock-note").hidden = !text;
  }

  async function loadLock() {
    try {
      lock = await api(lockPath(name));
    } catch (err) {
      lock = null;
      if (err.status === 404) note("No lock of this name has been taken yet.");
      else if (err.status === 403) note(`This token may not read this lock: ${err.message}`);
      else note(`Could not read the lock: ${err.message}`);
      if (err.status === 403) throw err;
    }
    const badge = $("lock-state");
    const countdown = $("f-countdown");
    if (!lock) {
      badge.hidden = true;
      delete countdown.dataset.until;
      countdown.textContent = "–";
      $("force").hidden = true;
      return;
    }
    note(session().admin || !lock.held ? "" : "Force-release needs an admin token.");
    badge.hidden = false;
    setState(badge, lock.held);
    setHolder($("f-holder"), lock.locked_by);
    $("f-fencing").textContent = lock.fencing_token;
    setTime($("f-locked-at"), lock.locked_at);
    setTime($("f-until"), lock.lock_until);
    countDown(countdown, lock.lock_until, lock.held);
    $("force").hidden = !(session().admin && lock.held);
  }

  function runNote(run) {
    switch (run.outcome) {
      case "force_released":
        return `by ${run.forced_by}: ${run.force_reason}`;
      case "running":
        return `held until ${formatTime(run.lock_until)}`;
      case "expired":
        return "ran past lock_until without a release";
      case "taken_over":
        return "ran out unreleased; the next holder took the lock";
      default:
        return "";
    }
  }

  function runRow(run) {
    const fragment = $("run-row").content.cloneNode(true);
    fill(fragment, {
      duration: formatDuration(run.duration_ms),
      skipped: run.skipped,
      fencing_token: run.fencing_token,
      note: runNote(run),
    });
    const badge = fragment.querySelector('[data-field="outcome"]');
    badge.textContent = run.outcome.replace("_", " ");
    badge.classList.add(run.outcome);
    setTime(fragment.querySelector('[data-field="acquired_at"]'), run.acquired_at);
    setHolder(fragment.querySelector('[data-field="locked_by"]'), run.locked_by);
    return fragment;
  }

  async function loadRuns(append) {
    const params = new URLSearchParams({ limit: String(append ? 50 : Math.min(Math.max(runs.length, 50), 1000)) });
    if (append && cursor) params.set("cursor", cursor);
    const page = await api(`${lockPath(name)}/runs?${params}`);
    runs = append ? runs.concat(page.items) : page.items;
    cursor = page.next_cursor;
    runRows.textContent = "";
    for (const run of runs) runRows.append(runRow(run));
    $("runs-empty").hidden = runs.length > 0;
    $("runs-more").hidden = !cursor;
    drawChart(runs);
  }

  async function loadSkips() {
    const skips = await api(`${lockPath(name)}/skips?hours=24`);
    $("f-skipped").textContent = skips.total === 1 ? "1 attempt" : `${skips.total} attempts`;
  }

  async function refresh() {
    if ($("force-dialog").open) return;
    try {
      await loadLock();
      await Promise.all([loadRuns(false), loadSkips()]);
      setStatus(`Updated ${formatTime(new Date(dbNow() ?? Date.now()).toISOString())}`);
    } catch (err) {
      if (err.status !== 403) setStatus(`Could not load the history: ${err.message}`, true);
    }
    tick();
  }

  $("runs-more").addEventListener("click", () => loadRuns(true).catch((err) => setStatus(err.message, true)));
  window.addEventListener("resize", () => drawChart(runs));
  forceRelease(name, () => lock, refresh);
  return { refresh };
}

// The confirmation asks for the reason the API requires; Cancel and Escape leave the lock alone.
function forceRelease(name, currentLock, refresh) {
  const dialog = $("force-dialog");
  const reason = $("force-reason");
  const confirm = $("force-confirm");
  $("force").addEventListener("click", () => {
    const lock = currentLock();
    $("force-holder").textContent = lock ? `Held by ${lock.locked_by}, fencing token ${lock.fencing_token}` : "";
    $("force-error").textContent = "";
    reason.value = "";
    dialog.showModal();
    reason.focus();
  });
  $("force-cancel").addEventListener("click", () => dialog.close());
  $("force-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!reason.value.trim()) {
      $("force-error").textContent = "Give a reason: it is recorded with the run.";
      reason.focus();
      return;
    }
    confirm.disabled = true;
    try {
      const answer = await api(`${lockPath(name)}/force-release`, {
        method: "POST",
        json: { reason: reason.value.trim() },
      });
      dialog.close();
      setStatus(answer.forced ? `Force-released ${name}.` : `${name} was not held: nothing changed.`);
      await refresh();
      $("force").hidden || $("force").focus();
    } catch (err) {
      $("force-error").textContent = `Not released: ${err.message}`;
    } finally {
      confirm.disabled = false;
    }
  });
}
