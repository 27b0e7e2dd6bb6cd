// schedlock dashboard: reads the lock API from the browser and fills the server-rendered page.
//
// The API token lives in sessionStorage (this tab only) and travels as an Authorization header; the page sets no
// cookie and sends none (credentials: "omit"), so another site cannot make the browser act with it. Every value from
// the API is written with textContent, never as HTML. Times are the database's: the page keeps the offset between
// the database's clock (db_time in every answer) and the browser's, and counts down on the database's time.
"use strict";

(() => {
  const TOKEN_KEY = "schedlock.token";
  const REFRESH_MS = 5000;
  const body = document.body;
  const base = body.dataset.base || "";
  const tokensRequired = body.dataset.auth === "tokens";
  const $ = (id) => document.getElementById(id);

  let session = null; // what /ui/session says the token may do
  let skewMs = 0; // database time minus browser time
  let skewKnown = false; // until the database has answered once, the page does not claim to know its time
  let timer = null;
  let page = null; // the page's loader, made once

  // ---- the API ------------------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message || `HTTP ${status}`);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, { method = "GET", json } = {}) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (json !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(base + path, {
        method,
        headers,
        body: json === undefined ? undefined : JSON.stringify(json),
        credentials: "omit",
        cache: "no-store",
      });
    } catch (err) {
      throw new ApiError(0, "network", "the server did not answer");
    }
    let data = null;
    try {
      data = await response.json();
    } catch (err) {
      data = null;
    }
    if (data && data.db_time) {
      skewMs = Date.parse(data.db_time) - Date.now();
      skewKnown = true;
    }
    if (!response.ok) {
      const error = (data && data.error) || {};
      const failure = new ApiError(response.status, error.code, error.message);
      if (response.status === 401 && tokensRequired) signOut(`The server refused the token: ${failure.message}`);
      throw failure;
    }
    return data;
  }

  const lockPath = (name) => `/v1/locks/${encodeURIComponent(name)}`;
  const dbNow = () => Date.now() + skewMs;

  // ---- formatting ---------------------------------------------------------------------------------------------

  function formatTime(iso) {
    return iso ? iso.replace("T", " ").replace(/\.\d+Z$/, " UTC").replace(/Z$/, " UTC") : "–";
  }

  function formatDuration(ms) {
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

  function setTime(element, iso) {
    element.textContent = formatTime(iso);
    if (iso) {
      element.dateTime = iso;
      element.title = `${new Date(iso).toLocaleString()} (your time)`;
    }
  }

  // schedlock's locked_by is "<holder> [schedlock via <token> lease <id>]" (app/locking/leases.py); anything else
  // was written by a Java ShedLock node (its hostname).
  const SCHEDLOCK_HOLDER = / \[schedlock(?: via ([A-Za-z0-9._:@-]+))? lease ([0-9a-f]+)\]$/;

  function setHolder(element, lockedBy) {
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

  function setStatus(text, bad = false) {
    const status = $("status");
    status.textContent = text;
    status.classList.toggle("error", bad);
  }

  function fill(fragment, values) {
    for (const element of fragment.querySelectorAll("[data-field]")) {
      const value = values[element.dataset.field];
      if (value !== undefined && value !== null) element.textContent = String(value);
    }
  }

  // Live countdowns: every element with data-until shows the time left (or since), and the matching state badge
  // turns to "free" once lock_until has passed on the database's clock.
  function tick() {
    const now = dbNow();
    if (skewKnown) $("db-time").textContent = formatTime(new Date(now).toISOString());
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

  function setState(badge, held) {
    badge.textContent = held ? "Held" : "Free";
    badge.className = `badge ${held ? "held" : "free"}`;
    badge.dataset.stateBadge = "";
  }

  // ---- signing in -----------------------------------------------------------------------------------------------

  function showSignin(message = "") {
    $("app").hidden = true;
    $("signin").hidden = false;
    $("signin-error").textContent = message;
    $("signout").hidden = true;
    $("who-text").textContent = "";
    $("token").focus();
  }

  function signOut(message = "") {
    sessionStorage.removeItem(TOKEN_KEY);
    session = null;
    clearInterval(timer);
    showSignin(message);
  }

  function showWho() {
    const who = $("who-text");
    who.textContent = "";
    if (!session.auth) {
      who.append("Open server: no API tokens (loopback only)");
      return;
    }
    who.append(`Token ${session.token}`);
    const tag = (text, cls = "") => {
      const span = document.createElement("span");
      span.className = `tag ${cls}`;
      span.textContent = text;
      who.append(span);
    };
    tag(session.access);
    if (session.admin) tag("admin", "admin");
    tag(session.prefixes ? `names: ${session.prefixes.join(", ")}` : "all names");
    $("signout").hidden = false;
  }

  async function start() {
    if (tokensRequired && !sessionStorage.getItem(TOKEN_KEY)) {
      showSignin();
      return;
    }
    try {
      session = await api("/ui/session");
    } catch (err) {
      if (err.status === 401) return; // signOut has shown the sign-in form with the reason
      setStatus(`Cannot reach the server: ${err.message}`, true);
      return;
    }
    $("signin").hidden = true;
    $("app").hidden = false;
    showWho();
    page = page || (body.dataset.page === "lock" ? lockPage() : locksPage());
    await page.refresh().catch(() => {});
    clearInterval(timer);
    timer = setInterval(() => {
      if (document.visibilityState === "visible") page.refresh().catch(() => {});
    }, REFRESH_MS);
  }

  // ---- the locks page -------------------------------------------------------------------------------------------

  function locksPage() {
    const form = $("filters");
    const rows = $("lock-rows");
    const template = $("lock-row");
    let cursor = null;
    let shown = 0;
    let debounce = null;

    function query(limit, after) {
      const params = new URLSearchParams({ limit: String(limit) });
      if (form.prefix.value) params.set("prefix", form.prefix.value);
      if (form.held.checked) params.set("held", "true");
      if (after) params.set("cursor", after);
      return params;
    }

    function row(lock) {
      const fragment = template.content.cloneNode(true);
      fill(fragment, { fencing_token: lock.fencing_token });
      setHolder(fragment.querySelector('[data-field="locked_by"]'), lock.locked_by);
      const link = fragment.querySelector('[data-field="name"]');
      link.textContent = lock.name;
      link.href = `${base}/ui/locks/${encodeURIComponent(lock.name)}`;
      setState(fragment.querySelector('[data-field="state"]'), lock.held);
      const countdown = fragment.querySelector('[data-field="countdown"]');
      countdown.dataset.until = lock.lock_until;
      countdown.dataset.held = String(lock.held);
      setTime(fragment.querySelector('[data-field="lock_until"]'), lock.lock_until);
      setTime(fragment.querySelector('[data-field="locked_at"]'), lock.locked_at);
      return fragment;
    }

    async function load(append) {
      // A refresh reloads as many rows as are shown, so "Load more" survives it (within the server's page cap).
      const limit = append ? 100 : Math.min(Math.max(shown, 100), 1000);
      let page;
      try {
        page = await api(`/v1/locks?${query(limit, append ? cursor : null)}`);
      } catch (err) {
        setStatus(`Could not load the locks: ${err.message}`, true);
        throw err;
      }
      if (!append) rows.textContent = "";
      for (const lock of page.items) rows.append(row(lock));
      shown = rows.children.length;
      cursor = page.next_cursor;
      $("more").hidden = !cursor;
      $("empty").hidden = shown > 0;
      const held = rows.querySelectorAll(".badge.held").length;
      const scope = form.prefix.value ? ` starting with “${form.prefix.value}”` : "";
      $("summary").textContent =
        `${shown}${cursor ? "+" : ""} ${form.held.checked ? "held " : ""}lock${shown === 1 ? "" : "s"}${scope}` +
        (form.held.checked ? "" : ` · ${held} held`);
      setStatus(`Updated ${formatTime(page.db_time)}`);
      tick();
    }

    function filtersChanged() {
      const params = new URLSearchParams();
      if (form.prefix.value) params.set("prefix", form.prefix.value);
      if (form.held.checked) params.set("held", "true");
      history.replaceState(null, "", `${base}/ui${params.size ? `?${params}` : ""}`);
      shown = 0;
      load(false).catch(() => {});
    }

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      filtersChanged();
    });
    form.prefix.addEventListener("input", () => {
      clearTimeout(debounce);
      debounce = setTimeout(filtersChanged, 250);
    });
    form.held.addEventListener("change", filtersChanged);
    $("more").addEventListener("click", () => load(true).catch(() => {}));
    return {
      refresh: () => ($("live").checked ? load(false) : Promise.resolve()),
    };
  }

  // ---- one lock's page ------------------------------------------------------------------------------------------

  function lockPage() {
    const name = body.dataset.lock;
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
        $("force").hidden = true;
        return;
      }
      note(session.admin || !lock.held ? "" : "Force-release needs an admin token.");
      badge.hidden = false;
      setState(badge, lock.held);
      setHolder($("f-holder"), lock.locked_by);
      $("f-fencing").textContent = lock.fencing_token;
      setTime($("f-locked-at"), lock.locked_at);
      setTime($("f-until"), lock.lock_until);
      countdown.dataset.until = lock.lock_until;
      countdown.dataset.held = String(lock.held);
      $("force").hidden = !(session.admin && lock.held);
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
      const params = new URLSearchParams({ limit: append ? "50" : String(Math.max(runs.length, 50)) });
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
        setStatus(`Updated ${formatTime(new Date(dbNow()).toISOString())}`);
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

  // The bar chart of run durations: one bar per run, oldest on the left, coloured by how it ended. It repeats the
  // table's data for the eye; screen readers get the table (the chart is one image with a summary).
  function drawChart(runs) {
    const SVG = "http://www.w3.org/2000/svg";
    const chart = $("chart");
    chart.textContent = "";
    if (!runs.length) return;
    const ordered = runs.slice().reverse();
    const width = Math.max(chart.clientWidth, 280); // drawn at the size it is shown: text is never stretched
    const height = 180;
    const left = 52;
    const bottom = 22;
    const top = 14;
    // The scale is the longest ended run's, so one long-running run does not flatten the others; a bar past it is
    // cut at the top and marked with its duration.
    const ended = ordered.filter((r) => r.outcome !== "running").map((r) => r.duration_ms || 0);
    const longest = Math.max(...(ended.length ? ended : ordered.map((r) => r.duration_ms || 0)), 1);
    const slots = Math.max(ordered.length, 12);
    const slot = (width - left) / slots;
    const x0 = left + (slots - ordered.length) * slot; // the newest run always ends at the right edge
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("role", "img");
    svg.setAttribute(
      "aria-label",
      `Durations of the last ${ordered.length} runs; the longest took ${formatDuration(longest)}.`,
    );
    const add = (tag, attrs, text) => {
      const node = document.createElementNS(SVG, tag);
      for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
      if (text !== undefined) node.textContent = text;
      svg.append(node);
      return node;
    };
    add("line", { class: "axis", x1: left, y1: height - bottom, x2: width, y2: height - bottom });
    add("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom });
    add("text", { x: left - 6, y: top + 9, "text-anchor": "end" }, formatDuration(longest));
    add("text", { x: left - 6, y: height - bottom, "text-anchor": "end" }, "0");
    add("line", { class: "grid-line", x1: left, y1: (top + height - bottom) / 2, x2: width, y2: (top + height - bottom) / 2 });
    add("text", { x: left - 6, y: (top + height - bottom) / 2 + 4, "text-anchor": "end" }, formatDuration(longest / 2));
    const first = ordered[0].acquired_at;
    const last = ordered.at(-1).acquired_at;
    // The date once when every run is on the same day; the time of day otherwise fits a phone's width.
    const sameDay = first.slice(0, 10) === last.slice(0, 10);
    const label = (iso) => (sameDay ? formatTime(iso).slice(11) : formatTime(iso).slice(5, 16));
    add("text", { x: left, y: height - 6 }, sameDay ? `${first.slice(0, 10)} ${label(first)}` : label(first));
    add("text", { x: width, y: height - 6, "text-anchor": "end" }, label(last));
    ordered.forEach((run, i) => {
      const full = height - bottom - top;
      const over = (run.duration_ms || 0) > longest;
      const h = over ? full - 6 : Math.max(((run.duration_ms || 0) / longest) * full, 2);
      if (over) {
        const mark = { class: "over", x: x0 + (i + 0.85) * slot, y: top + 2, "text-anchor": "end" };
        add("text", mark, `↑ ${formatDuration(run.duration_ms)}`);
      }
      const bar = add("rect", {
        class: run.outcome,
        x: x0 + i * slot + slot * 0.15,
        y: height - bottom - h,
        width: slot * 0.7,
        height: h,
        rx: 1.5,
      });
      const title = document.createElementNS(SVG, "title");
      title.textContent =
        `#${run.fencing_token} ${run.outcome.replace("_", " ")} · ${formatDuration(run.duration_ms)} · ` +
        `${formatTime(run.acquired_at)} · ${run.locked_by}` + (run.skipped ? ` · skipped by ${run.skipped}` : "");
      bar.append(title);
    });
    chart.append(svg);
  }

  // ---- force-release --------------------------------------------------------------------------------------------

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

  // ---- wiring -----------------------------------------------------------------------------------------------------

  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = $("token").value.trim();
    if (!value) return;
    sessionStorage.setItem(TOKEN_KEY, value);
    $("token").value = "";
    await start();
  });
  $("signout").addEventListener("click", () => signOut());
  setInterval(tick, 1000);
  start();
})();
