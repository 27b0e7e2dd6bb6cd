// The jobs pages: /ui/jobs (each job's state, schedule, next tick and its last ticks as a strip of coloured cells)
// and /ui/jobs/{name} (the job and its ticks, newest first). States come from the API, decided on the database's
// clock (docs/jobs.md); the page only draws them.

import { api, base } from "./api.js";
import { $, fill, formatTime, setHolder, setStatus, setTime, tick } from "./format.js";
import { listPage } from "./listing.js";

const MAX = Number(document.body.dataset.listMax) || 100; // the server's SCHEDLOCK_LIST_MAX_LIMIT
const LABELS = { timed_out: "timed out" };

/** A job's state badge: up, late, down, paused or new. */
export function setJobState(badge, state) {
  badge.textContent = state;
  badge.className = `badge job-${state}`;
}

/** A tick state's badge, coloured as the strip's cells. */
function setTickState(badge, state, duplicate) {
  badge.textContent = (LABELS[state] || state) + (duplicate ? " ×2+" : "");
  badge.className = `badge tick-${state}`;
  if (duplicate) badge.title = "more than one run completed in this tick's window";
}

function strip(element, ticks) {
  element.textContent = "";
  element.setAttribute("role", "img");
  const states = ticks.map((t) => LABELS[t.state] || t.state);
  element.setAttribute("aria-label", states.length ? `last ticks, oldest first: ${states.join(", ")}` : "no tick due yet");
  for (const t of ticks) {
    const cell = document.createElement("span");
    cell.className = `cell ${t.state}`;
    cell.title = `${formatTime(t.tick)}: ${LABELS[t.state] || t.state}`;
    element.append(cell);
  }
}

export function jobsPage() {
  const form = $("filters");
  const rows = $("job-rows");
  const template = $("job-row");

  function params() {
    const params = new URLSearchParams();
    if (form.prefix.value) params.set("prefix", form.prefix.value);
    return params;
  }

  function row(job) {
    const fragment = template.content.cloneNode(true);
    fill(fragment, { schedule: job.schedule, zone: `${job.timezone} · grace ${job.grace}` });
    const link = fragment.querySelector('[data-field="name"]');
    link.textContent = job.name;
    link.href = `${base}/ui/jobs/${encodeURIComponent(job.name)}`;
    setJobState(fragment.querySelector('[data-field="state"]'), job.state);
    strip(fragment.querySelector('[data-field="strip"]'), job.recent);
    setTime(fragment.querySelector('[data-field="next_tick"]'), job.next_tick);
    setTime(fragment.querySelector('[data-field="last_completed_at"]'), job.last_completed_at);
    return fragment;
  }

  function summary(shown, more) {
    const down = rows.querySelectorAll(".badge.job-down").length;
    const late = rows.querySelectorAll(".badge.job-late").length;
    return `${shown}${more ? "+" : ""} job${shown === 1 ? "" : "s"} · ${down} down · ${late} late`;
  }

  const list = listPage({ path: "/v1/jobs", params, rows, row, summary, what: "the jobs", address: "/ui/jobs" });
  return { refresh: list.refresh };
}

export function jobPage() {
  const name = document.body.dataset.job;
  const path = `/v1/jobs/${encodeURIComponent(name)}`;
  const rows = $("tick-rows");
  const template = $("tick-row");

  function row(t) {
    const fragment = template.content.cloneNode(true);
    const run = t.run;
    const note = [];
    if (run && t.state === "failed" && run.outcome === "released") note.push("released with completed: false");
    else if (run && run.outcome !== "running") note.push(run.outcome.replace("_", " "));
    if (t.duplicate) note.push("duplicate: more than one run completed");
    if (run && run.force_reason) note.push(`forced by ${run.forced_by}: ${run.force_reason}`);
    fill(fragment, {
      runs: t.runs,
      skipped: t.skipped,
      fencing_token: run ? run.fencing_token : "–",
      note: note.join(" · "),
    });
    setTickState(fragment.querySelector('[data-field="state"]'), t.state, t.duplicate);
    setTime(fragment.querySelector('[data-field="tick"]'), t.tick);
    const holder = fragment.querySelector('[data-field="holder"]');
    if (run) setHolder(holder, run.locked_by);
    else holder.textContent = "–";
    return fragment;
  }

  async function load() {
    let job, ticks;
    try {
      [job, ticks] = await Promise.all([api(path), api(`${path}/ticks?limit=${Math.min(50, MAX)}`)]);
    } catch (err) {
      setStatus(err.code === "job_not_found" ? "No job of that name is registered." : `Could not load: ${err.message}`, true);
      throw err;
    }
    setJobState($("job-state"), job.state);
    $("f-schedule").textContent = `${job.schedule} (${job.timezone})`;
    $("f-grace").textContent = job.grace;
    setTime($("f-next"), job.next_tick);
    setTime($("f-completed"), job.last_completed_at);
    setTime($("f-since"), job.expected_since);
    $("f-description").hidden = !job.description;
    $("f-description").textContent = job.description || "";
    rows.textContent = "";
    for (const t of ticks.items) rows.append(row(t));
    $("empty").hidden = ticks.items.length > 0;
    setStatus(`Updated ${formatTime(ticks.db_time)}`);
    tick();
  }

  return { refresh: load };
}
