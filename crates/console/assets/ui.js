// Small DOM helpers shared by the views.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function fmtBytes(n) {
  if (n === undefined || n === null || Number.isNaN(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + " " + units[i];
}

export function fmtDate(s) {
  if (!s) return "";
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? s : d.toLocaleString();
}

export function toast(message, bad = false) {
  const box = document.getElementById("toast");
  const el = h("div", { class: bad ? "bad" : "" }, message);
  box.append(el);
  setTimeout(() => el.remove(), bad ? 8000 : 4000);
}

// An error region that says what the server said.
export function errorBox() {
  const el = h("div", { class: "error", role: "alert", hidden: true });
  el.show = (err) => {
    if (!err) { el.hidden = true; el.textContent = ""; return; }
    const code = err.code ? ` (${err.code})` : "";
    el.textContent = (err.message || String(err)) + code;
    el.hidden = false;
  };
  return el;
}

export function setMain(...children) {
  const main = document.getElementById("main");
  main.replaceChildren(...children);
  return main;
}
