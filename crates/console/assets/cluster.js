// The cluster page: nodes, drives, erasure sets, heal status (the admin API), and charts from
// the server's metrics over the last minutes.
import * as api from "./api.js";
import { h, fmtBytes, fmtDate, errorBox, setMain } from "./ui.js";
import * as metrics from "./metrics.js";
import { chart } from "./chart.js";

let timer = null;

export function leaveCluster() {
  if (timer) clearInterval(timer);
  timer = null;
}

const badge = (ok, yes = "online", no = "offline") => h("span", { class: `badge ${ok ? "ok" : "bad"}` }, ok ? yes : no);
const stat = (label, value, id) => h("div", { class: "stat", id }, h("b", {}, value), label);
const perSec = (f) => (v) => `${f(v)}/s`;
const num = (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
const ms = (v) => `${(v * 1000).toFixed(v < 0.01 ? 2 : 0)} ms`;

function infoPart(info) {
  const t = info.totals;
  const nodes = h("table", { id: "nodes", "aria-label": "Nodes" },
    h("thead", {}, h("tr", {}, h("th", {}, "Node"), h("th", {}, "State"), h("th", { class: "num" }, "Round trip"), h("th", { class: "hide-narrow" }, "Detail"))),
    h("tbody", {}, (info.nodes.length ? info.nodes : [{ address: "this node", local: true, online: true }]).map((n) =>
      h("tr", { "data-node": n.address, "data-online": String(n.online) },
        h("td", { class: "name" }, n.address, n.local ? h("span", { class: "muted" }, " (this node)") : null),
        h("td", {}, badge(n.online)), h("td", { class: "num" }, n.rtt_us != null ? `${(n.rtt_us / 1000).toFixed(1)} ms` : "–"),
        h("td", { class: "hide-narrow muted" }, n.error || "")))));
  const sets = info.sets.map((st) => h("div", { class: "card", "data-set": String(st.index) },
    h("h3", {}, `Set ${st.index + 1}: erasure ${st.data}+${st.parity} `,
      badge(st.drives_online >= st.write_quorum, "writable", st.drives_online >= st.read_quorum ? "read-only" : "unavailable")),
    h("p", { class: "muted" }, `${st.drives_online} of ${st.drives.length} drives online; read quorum ${st.read_quorum}, write quorum ${st.write_quorum}`),
    h("table", { "aria-label": `Drives of set ${st.index + 1}` },
      h("thead", {}, h("tr", {}, h("th", {}, "Drive"), h("th", {}, "State"), h("th", { class: "num" }, "Free"), h("th", { class: "hide-narrow" }, "Used"))),
      h("tbody", {}, st.drives.map((d) => {
        const used = d.total_bytes ? (d.total_bytes - d.free_bytes) / d.total_bytes : 0;
        const fill = h("span", {});
        fill.style.width = `${(used * 100).toFixed(1)}%`;
        return h("tr", { "data-drive": d.endpoint, "data-online": String(d.online) },
          h("td", { class: "name" }, d.endpoint), h("td", {}, badge(d.online), d.error ? h("div", { class: "muted" }, d.error) : null),
          h("td", { class: "num" }, d.online ? `${fmtBytes(d.free_bytes)} of ${fmtBytes(d.total_bytes)}` : "–"),
          h("td", { class: "hide-narrow" }, d.online ? h("div", { class: "bar", title: `${(used * 100).toFixed(1)}% used` }, fill) : ""));
      })))));
  return [
    h("div", { class: "stats" },
      stat("nodes online", `${t.nodes_online || (info.mode === "single" ? 1 : 0)} / ${t.nodes || 1}`, "stat-nodes"),
      stat("drives online", `${t.drives_online} / ${t.drives}`, "stat-drives"),
      stat("sets writable", `${t.sets_writable} / ${t.sets}`, "stat-sets"),
      stat("free space", `${fmtBytes(t.free_bytes)} of ${fmtBytes(t.total_bytes)}`, "stat-space")),
    h("h2", {}, "Nodes"), h("div", { class: "card" }, nodes),
    h("h2", {}, "Erasure sets and drives"), h("div", { class: "grid" }, sets),
  ];
}

const STATE = { healing: ["ok", "healing now"], queued: ["warn", "queued"], retry: ["bad", "waiting for a drive"] };

// What the heal workers hold (a sample when the lists are long) and replaced drives' heals.
function healLists(heal) {
  const parts = [];
  if (heal.queue?.length) {
    const waiting = heal.queue_len + heal.retry_len;
    const listed = heal.queue.filter((e) => e.state !== "healing").length;
    parts.push(h("table", { id: "heal-queue", "aria-label": "Heal queue" },
      h("thead", {}, h("tr", {}, h("th", {}, "Object"), h("th", {}, "State"), h("th", { class: "num hide-narrow" }, "Set"), h("th", { class: "num" }, "Failed attempts"), h("th", { class: "num hide-narrow" }, "Next try"))),
      h("tbody", {}, heal.queue.map((e) => h("tr", { "data-heal": `${e.bucket}/${e.key}`, "data-state": e.state },
        h("td", { class: "name" }, `${e.bucket}/${e.key}`), h("td", {}, h("span", { class: `badge ${STATE[e.state]?.[0] || ""}` }, STATE[e.state]?.[1] || e.state)),
        h("td", { class: "num hide-narrow" }, String(e.set + 1)), h("td", { class: "num" }, String(e.attempts)),
        h("td", { class: "num hide-narrow" }, e.due_in_seconds != null ? `in ${e.due_in_seconds.toFixed(0)} s` : "–"))))));
    if (waiting > listed) parts.push(h("p", { class: "muted" }, `and ${(waiting - listed).toLocaleString()} more not listed`));
  }
  for (const d of heal.drive_heals || []) {
    parts.push(h("p", { class: "drive-heal", "data-drive": d.endpoint },
      h("span", { class: `badge ${d.phase === "done" ? "ok" : "warn"}` }, `drive ${d.phase}`), " ",
      h("span", { class: "name" }, d.endpoint), `: ${d.scanned.toLocaleString()} objects checked, ${d.healed.toLocaleString()} healed (${fmtBytes(d.bytes)}), ${d.failed} failed`,
      d.bucket ? `, at ${d.bucket}/${d.last_key || ""}` : "", d.phase === "done" ? `; verified with ${d.verify_missing} missing` : ""));
  }
  return parts;
}

function healPart(heal) {
  const sc = heal.scanner;
  return h("div", { class: "card", id: "heal" }, h("dl", { class: "kv" },
    h("dt", {}, "Heal queue"), h("dd", {}, `${heal.queue_len} waiting, ${heal.retry_len} waiting for a drive to return`),
    h("dt", {}, "Healed"), h("dd", {}, `${heal.healed_objects_total} objects (${heal.failed_total} failed, ${heal.given_up_total} given up, ${heal.queue_dropped_total} dropped)`),
    h("dt", {}, "Scanner"), h("dd", {}, !sc.enabled ? "off" : sc.running ? "running now" : "idle",
      sc.enabled ? `; ${sc.passes_total} passes, ${sc.objects_total} objects checked, ${sc.healed_total} healed` : ""),
    h("dt", {}, "Last pass"), h("dd", {}, sc.last_pass_end ? `${fmtDate(sc.last_pass_start)} – ${fmtDate(sc.last_pass_end)}` : "none yet")), ...healLists(heal));
}

function chartsPart() {
  const byOp = (l) => l.op;
  return h("div", { class: "grid", id: "charts" },
    chart("Requests by operation", metrics.rates("quarry_s3_requests_total", byOp), perSec(num)),
    chart("Errors by status class", metrics.rates("quarry_s3_requests_total", (l) => `${l.code[0]}xx`, (l) => Number(l.code) >= 400), perSec(num)),
    chart("S3 bytes in / out", (() => {
      const i = metrics.rates("quarry_s3_received_bytes_total"), o = metrics.rates("quarry_s3_sent_bytes_total");
      return { times: i.times, lines: [{ name: "in", values: i.lines[0]?.values || [] }, { name: "out", values: o.lines[0]?.values || [] }] };
    })(), perSec(fmtBytes)),
    chart("Latency, all operations", metrics.quantiles([0.5, 0.99]), ms),
    chart("Data plane bytes by backend", (() => {
      const i = metrics.rates("quarry_dataplane_received_bytes_total", (l) => `${l.backend} in`);
      const o = metrics.rates("quarry_dataplane_sent_bytes_total", (l) => `${l.backend} out`);
      return { times: i.times.length ? i.times : o.times, lines: [...i.lines, ...o.lines] };
    })(), perSec(fmtBytes)),
    chart("GET bytes copied / decoded", (() => {
      const c = metrics.rates("quarry_get_copied_bytes_total", () => "copied");
      const d = metrics.rates("quarry_get_decoded_bytes_total", () => "decoded");
      return { times: c.times, lines: [...c.lines, ...d.lines] };
    })(), perSec(fmtBytes)),
    chart("Buffer pool in use", metrics.gauges("quarry_buffer_pool_buffers", (l) => `${l.pool} ${l.state}`), num));
}

export async function clusterView() {
  const err = errorBox();
  const infoBox = h("div", { id: "cluster-info" }, h("p", { class: "muted" }, "Asking every node…"));
  const healBox = h("div", {}, h("p", { class: "muted" }, "…"));
  const chartsBox = h("div", {});
  const stamp = h("span", { class: "muted", "aria-live": "off" });
  setMain(h("div", { class: "row" }, h("h1", {}, "Cluster"), h("span", { class: "spacer" }), stamp), err, infoBox,
    h("h2", {}, "Healing"), healBox, h("h2", {}, "Traffic (this node, last minutes)"), chartsBox);

  const refresh = async () => {
    try {
      const [info, heal] = await Promise.all([api.adminJson("info"), api.adminJson("heal/status")]);
      infoBox.replaceChildren(...infoPart(info));
      healBox.replaceChildren(healPart(heal));
      err.show(null);
      stamp.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    } catch (x) {
      err.show(x.code === "AccessDenied" ? Object.assign(x, { message: "Your identity may not read the cluster's state: " + x.message }) : x);
    }
    try {
      await metrics.sample();
      chartsBox.replaceChildren(chartsPart());
    } catch (x) {
      chartsBox.replaceChildren(h("p", { class: "muted" }, `Metrics unavailable: ${x.message}`));
    }
  };
  leaveCluster();
  await metrics.seed();
  await refresh();
  timer = setInterval(refresh, metrics.EVERY_MS);
}
