// The locks page (/ui): the locks now, filtered by name prefix and held-only, counting down to their lock_until.

import { base } from "./api.js";
import { $, countDown, fill, setHolder, setState, setTime } from "./format.js";
import { listPage } from "./listing.js";

/** The locks page (/ui): the list, its filters (kept in the address) and "Load more". */
export function locksPage() {
  const form = $("filters");
  const rows = $("lock-rows");
  const template = $("lock-row");
  let debounce = null;

  function params() {
    const params = new URLSearchParams();
    if (form.prefix.value) params.set("prefix", form.prefix.value);
    if (form.held.checked) params.set("held", "true");
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

  function summary(shown, more) {
    const held = rows.querySelectorAll(".badge.held").length;
    const scope = form.prefix.value ? ` starting with “${form.prefix.value}”` : "";
    return (
      `${shown}${more ? "+" : ""} ${form.held.checked ? "held " : ""}lock${shown === 1 ? "" : "s"}${scope}` +
      (form.held.checked ? "" : ` · ${held} held`)
    );
  }

  const list = listPage({ path: "/v1/locks", params, rows, row, summary, what: "the locks", address: "/ui" });
  form.prefix.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(list.filtered, 250);
  });
  form.held.addEventListener("change", list.filtered);
  return { refresh: list.refresh };
}
