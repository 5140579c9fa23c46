// The server's own Prometheus metrics, sampled while the cluster page is open and kept for the
// last minutes in page memory (seeded from the server's history of them), turned into rates and
// percentiles.
import * as api from "./api.js";

export const EVERY_MS = 5000;
const KEEP_MS = 10 * 60 * 1000;
const samples = []; // {t, series: Map(name{labels} -> value)}

// Prometheus text format: `name{a="b",c="d"} value`.
export function parse(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const sp = line.lastIndexOf(" ");
    if (sp < 0) continue;
    const v = Number(line.slice(sp + 1));
    if (!Number.isNaN(v)) out.set(line.slice(0, sp), v);
  }
  return out;
}

function labels(id) {
  const i = id.indexOf("{");
  const name = i < 0 ? id : id.slice(0, i);
  const l = {};
  if (i >= 0) for (const m of id.slice(i + 1, -1).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) l[m[1]] = m[2];
  return { name, l };
}

// Seeds the page's samples with the server's own history (the last ten minutes, a sample every
// ten seconds), once, so the charts do not start empty. A server without it changes nothing.
let seeded = false;
export async function seed() {
  if (seeded) return;
  seeded = true;
  try {
    const h = await api.adminJson("metrics/history");
    const first = samples.length ? samples[0].t : Infinity;
    const old = h.samples.filter((s) => s.t < first && s.t >= Date.now() - KEEP_MS).map((s) => ({ t: s.t, series: parse(s.text) }));
    samples.unshift(...old);
  } catch (_) { seeded = false; }
}

export async function sample() {
  const r = await api.admin("metrics");
  const series = parse(await r.text());
  const t = Date.now();
  samples.push({ t, series });
  while (samples.length && samples[0].t < t - KEEP_MS) samples.shift();
}

// Sums `name` per group (a function of the labels) for each sample.
function grouped(name, group, filter = () => true) {
  return samples.map((s) => {
    const g = new Map();
    for (const [id, v] of s.series) {
      const { name: n, l } = labels(id);
      if (n !== name || !filter(l)) continue;
      const k = group(l);
      g.set(k, (g.get(k) || 0) + v);
    }
    return { t: s.t, g };
  });
}

// Per-second rates between consecutive samples: {times, lines: [{name, values}]}.
export function rates(name, group = () => "all", filter) {
  const gs = grouped(name, group, filter);
  const keys = new Set();
  for (const s of gs) for (const k of s.g.keys()) keys.add(k);
  const times = gs.slice(1).map((s) => s.t);
  const lines = [...keys].sort().map((k) => ({
    name: k,
    values: gs.slice(1).map((s, i) => {
      const dt = (s.t - gs[i].t) / 1000;
      const d = (s.g.get(k) || 0) - (gs[i].g.get(k) || 0);
      return dt > 0 && d >= 0 ? d / dt : 0;
    }),
  }));
  return { times, lines };
}

export function gauges(name, group, filter) {
  const gs = grouped(name, group, filter);
  const keys = new Set();
  for (const s of gs) for (const k of s.g.keys()) keys.add(k);
  return { times: gs.map((s) => s.t), lines: [...keys].sort().map((k) => ({ name: k, values: gs.map((s) => s.g.get(k) ?? 0) })) };
}

// Latency quantiles (seconds) of all operations from the histogram's bucket deltas.
export function quantiles(qs) {
  const gs = grouped("quarry_s3_request_duration_seconds_bucket", (l) => l.le);
  const times = gs.slice(1).map((s) => s.t);
  const lines = qs.map((q) => ({
    name: `p${Math.round(q * 100)}`,
    values: gs.slice(1).map((s, i) => {
      const bounds = [...s.g.keys()].map((le) => ({ le, b: le === "+Inf" ? Infinity : Number(le) })).sort((a, b) => a.b - b.b);
      const d = bounds.map(({ le, b }) => ({ b, n: (s.g.get(le) || 0) - (gs[i].g.get(le) || 0) }));
      const total = d.length ? d[d.length - 1].n : 0;
      if (total <= 0) return 0;
      const want = q * total;
      let prevB = 0, prevN = 0;
      for (const { b, n } of d) {
        if (n >= want) {
          if (b === Infinity) return prevB;
          return prevB + ((b - prevB) * (want - prevN)) / Math.max(1, n - prevN);
        }
        prevB = b; prevN = n;
      }
      return prevB;
    }),
  }));
  return { times, lines };
}

export const count = () => samples.length;
