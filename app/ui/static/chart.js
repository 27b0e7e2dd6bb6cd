// The bar chart of a lock's runs, drawn as SVG by hand (no chart library to vendor).

import { $, formatDuration, formatTime } from "./format.js";

// The bar chart of run durations: one bar per run, oldest on the left, coloured by how it ended. It repeats the
// table's data for the eye; screen readers get the table (the chart is one image with a summary).
export function drawChart(runs) {
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
