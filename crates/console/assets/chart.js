// Line charts in plain SVG: no library, nothing to load, nothing the CSP has to allow.
import { h } from "./ui.js";

const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#3b82c4", "#d9822b", "#3aa564", "#c0392b", "#8e6cc8", "#17a2b8", "#b8860b", "#e056a0"];

function s(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  return el;
}

// A chart card: title, an SVG of `data` ({times, lines:[{name, values}]}), a legend, and a
// text summary for screen readers.
export function chart(title, data, fmt) {
  const W = 400, H = 140, L = 72, B = 18, T = 6, R = 6;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
  const all = data.lines.flatMap((l) => l.values);
  const max = Math.max(1e-9, ...all);
  const n = data.times.length;
  const t0 = data.times[0], t1 = data.times[n - 1];
  const x = (t) => (n < 2 ? L : L + ((t - t0) / (t1 - t0)) * (W - L - R));
  const y = (v) => T + (1 - v / max) * (H - T - B);
  for (const f of all.some((v) => v > 0) ? [0, 0.5, 1] : [0]) {
    const yy = y(max * f);
    svg.append(s("line", { x1: L, x2: W - R, y1: yy, y2: yy, stroke: "currentColor", "stroke-opacity": "0.15" }));
    const label = s("text", { x: L - 4, y: yy + 4, "text-anchor": "end", "font-size": "10", fill: "currentColor", "fill-opacity": "0.7" });
    label.textContent = fmt(max * f);
    svg.append(label);
  }
  if (n >= 2) {
    const span = s("text", { x: W - R, y: H - 4, "text-anchor": "end", "font-size": "10", fill: "currentColor", "fill-opacity": "0.7" });
    span.textContent = `last ${Math.round((t1 - t0) / 1000)} s`;
    svg.append(span);
  }
  data.lines.forEach((l, i) => {
    const pts = l.values.map((v, j) => `${x(data.times[j]).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    if (n >= 2) svg.append(s("polyline", { points: pts, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": "1.8", "vector-effect": "non-scaling-stroke" }));
  });
  const latest = data.lines.map((l) => `${l.name} ${fmt(l.values[l.values.length - 1] ?? 0)}`).join(", ");
  const legend = h("div", { class: "legend" }, data.lines.map((l, i) => {
    const sw = h("i", {});
    sw.style.background = COLORS[i % COLORS.length];
    return h("span", {}, sw, `${l.name}: ${fmt(l.values[l.values.length - 1] ?? 0)}`);
  }));
  const empty = n < 2 ? h("p", { class: "muted" }, "Collecting samples…") : null;
  return h("figure", { class: "card chart", "aria-label": `${title}: ${latest || "no data yet"}` },
    h("h3", {}, title), svg, legend, empty);
}
