// The locks page (/ui): the locks now, filtered by name prefix and held-only, counting down to their lock_until.

import { api, base } from "./api.js";
import { $, countDown, fill, formatTime, setHolder, setState, setStatus, setTime, tick } from "./format.js";

/** The locks page (/ui): the list, its filters (kept in the address) and "Load more". */
const MAX = Number(document.body.dataset.listMax) || 100; // the server's SCHEDLOCK_LIST_MAX_LIMIT
const PAGE = Math.min(100, MAX);

export function locksPage() {
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
    countDown(fragment.querySelector('[data-field="countdown"]'), lock.lock_until, lock.held);
    setTime(fragment.querySelector('[data-field="lock_until"]'), lock.lock_until);
    setTime(fragment.querySelector('[data-field="locked_at"]'), lock.locked_at);
    return fragment;
  }

  async function load(append) {
    // A refresh reloads as many rows as are shown, so "Load more" survives it; the server caps each request
    // (SCHEDLOCK_LIST_MAX_LIMIT), so that may take several pages.
    const wanted = append ? PAGE : Math.max(shown, PAGE);
    const items = [];
    let after = append ? cursor : null;
    let page;
    try {
      do {
        page = await api(`/v1/locks?${query(Math.min(wanted - items.length, MAX), after)}`);
        items.push(...page.items);
        after = page.next_cursor;
      } while (after && items.length < wanted);
    } catch (err) {
      setStatus(`Could not load the locks: ${err.message}`, true);
      throw err;
    }
    if (!append) rows.textContent = "";
    for (const lock of items) rows.append(row(lock));
    shown = rows.children.length;
    cursor = after;
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
