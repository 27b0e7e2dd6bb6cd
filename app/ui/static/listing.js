// What the list pages share (/ui, the locks; /ui/jobs, the jobs): pages of rows fetched through the list's cursor,
// "Load more", the empty note, the summary, the filters kept in the address, and a refresh while "live" is on.

import { api, base } from "./api.js";
import { $, formatTime, setStatus, tick } from "./format.js";

const MAX = Number(document.body.dataset.listMax) || 100; // the server's SCHEDLOCK_LIST_MAX_LIMIT
const PAGE = Math.min(100, MAX);

/**
 * A list page: ``path`` is the list route (``/v1/locks``), ``params()`` the filters' query parameters, ``row(item)``
 * a row, ``summary(shown, more)`` the line above the table, ``what`` what failed to load ("the locks"), ``address``
 * the page's own path (``/ui``). The page's ids: ``filters``, ``rows``' tbody, ``more``, ``empty``, ``summary``.
 */
export function listPage({ path, params, rows, row, summary, what, address }) {
  let cursor = null;
  let shown = 0;

  async function load(append) {
    // A refresh reloads as many rows as are shown, so "Load more" survives it; the server caps each request
    // (SCHEDLOCK_LIST_MAX_LIMIT), so that may take several pages.
    const wanted = append ? PAGE : Math.max(shown, PAGE);
    const items = [];
    let after = append ? cursor : null;
    let page;
    try {
      do {
        const query = params();
        query.set("limit", String(Math.min(wanted - items.length, MAX)));
        if (after) query.set("cursor", after);
        page = await api(`${path}?${query}`);
        items.push(...page.items);
        after = page.next_cursor;
      } while (after && items.length < wanted);
    } catch (err) {
      setStatus(`Could not load ${what}: ${err.message}`, true);
      throw err;
    }
    if (!append) rows.textContent = "";
    for (const item of items) rows.append(row(item));
    shown = rows.children.length;
    cursor = after;
    $("more").hidden = !cursor;
    $("empty").hidden = shown > 0;
    $("summary").textContent = summary(shown, Boolean(cursor));
    setStatus(`Updated ${formatTime(page.db_time)}`);
    tick();
  }

  /** The filters changed: keep them in the address, and load the list from its start. */
  function filtered() {
    const query = params();
    history.replaceState(null, "", `${base}${address}${query.size ? `?${query}` : ""}`);
    shown = 0;
    load(false).catch(() => {});
  }

  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    filtered();
  });
  $("more").addEventListener("click", () => load(true).catch(() => {}));
  return {
    filtered,
    refresh: () => ($("live").checked ? load(false) : Promise.resolve()),
  };
}
