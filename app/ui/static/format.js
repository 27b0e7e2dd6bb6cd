// How the page writes what the API answered: times, durations, holders, states and live countdowns. Every value
// from the API goes into the page as text (textContent), never as HTML.

import { dbNow } from "./api.js";

export const $ = (id) => document.getElementById(id);

/** "2026-11-29T03:00:00.012Z" -> "2026-11-29 03:00:00 UTC": the database's UTC, to the second. */
export function formatTime(iso) {
  return iso ? iso.replace("T", " ").replace(/(\.\d+)?Z$/, " UTC") : "–";
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = Math.abs(ms) / 1000;
  if (s < 1) return `${Math.round(Math.abs(ms))} ms`;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** A <time> element showing ``iso`` in UTC, with the reader's own time zone on hover. */
export function setTime(element, iso) {
  element.textContent = formatTime(iso);
  if (iso) {
    element.dateTime = iso;
    element.title = `${new Date(iso).toLocaleString()} (your time)`;
  }
}

// schedlock's locked_by is "<holder> [schedlock via <token> lease <id>]" (app/locking/leases.py); anything else
// was written by a Java ShedLock node (its hostname).
const SCHEDLOCK_HOLDER = / \[schedlock(?: via ([A-Za-z0-9._:@-]+))? lease ([0-9a-f]+)\]$/;

/** The holder's own text, and under it, small, the lease and the token (or that a Java node holds it). */
export function setHolder(element, lockedBy) {
  element.textContent = "";
  element.title = lockedBy;
  const match = SCHEDLOCK_HOLDER.exec(lockedBy);
  const box = document.createElement("span");
  box.className = "stack";
  const main = document.createElement("span");
  main.textContent = match ? lockedBy.slice(0, match.index) : lockedBy;
  const sub = document.createElement("span");
  sub.className = "sub";
  sub.textContent = match ? `lease ${match[2]}${match[1] ? ` · token ${match[1]}` : ""}` : "Java ShedLock node";
  box.append(main, sub);
  element.append(box);
}

export function setState(badge, held) {
  badge.textContent = held ? "Held" : "Free";
  badge.className = `badge ${held ? "held" : "free"}`;
  badge.dataset.stateBadge = "";
}

/** Fills each [data-field] of a cloned template with the value of that name. */
export function fill(fragment, values) {
  for (const element of fragment.querySelectorAll("[data-field]")) {
    const value = values[element.dataset.field];
    if (value !== undefined && value !== null) element.textContent = String(value);
  }
}

/** Makes ``element`` count down to ``until`` (and the state badge of its row turn "Free" when it passes). */
export function countDown(element, until, held) {
  element.dataset.until = until;
  element.dataset.held = String(held);
}

export function setStatus(text, bad = false) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("error", bad);
}

// Live countdowns, every second, on the database's clock.
export function tick() {
  const now = dbNow();
  if (now === null) return;
  $("db-time").textContent = formatTime(new Date(now).toISOString());
  for (const element of document.querySelectorAll("[data-until]")) {
    const left = Date.parse(element.dataset.until) - now;
    const held = left > 0 && element.dataset.held === "true";
    element.textContent = held ? `in ${formatDuration(left)}` : `free · ${formatDuration(Math.max(-left, 0))} ago`;
    element.classList.toggle("soon", held && left < 60000);
    element.classList.toggle("past", !held);
    const badge = element.closest("tr, main")?.querySelector("[data-state-badge]");
    if (badge) setState(badge, held);
  }
}
