// Buckets, the prefix browser, object details, share links.
import * as api from "./api.js";
import { h, fmtBytes, fmtDate, toast, errorBox, setMain } from "./ui.js";
import { uploadFiles } from "./upload.js";

const PAGE = 100;
// Buckets are counted by listing them; beyond this many keys the count says "at least".
const COUNT_LIMIT = 10000;

const text = (el, sel) => el.querySelector(sel)?.textContent ?? "";
export const bucketHash = (b, prefix = "") => `#/b/${encodeURIComponent(b)}/${encodeURIComponent(prefix)}`;
const objectHash = (b, key) => `#/o/${encodeURIComponent(b)}/${encodeURIComponent(key)}`;

async function bucketUsage(bucket) {
  let count = 0, bytes = 0, token = null, pages = 0;
  for (;;) {
    const doc = await api.s3Xml(api.s3Path(bucket), { query: { "list-type": "2", "max-keys": "1000", "continuation-token": token } });
    for (const c of doc.querySelectorAll("Contents")) { count++; bytes += Number(text(c, "Size")); }
    pages++;
    if (text(doc, "IsTruncated") !== "true") return { count, bytes, more: false };
    if (count >= COUNT_LIMIT || pages >= 20) return { count, bytes, more: true };
    token = text(doc, "NextContinuationToken");
  }
}

const XMLNS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"';
const esc = (v) => v.replace(/[<>&'"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", "'": "&apos;", '"': "&quot;" })[c]);
const xmlPut = (bucket, key, sub, body) => api.s3(api.s3Path(bucket, key), { method: "PUT", query: { [sub]: "" },
  headers: { "Content-Type": "application/xml" }, body });

// An SSE algorithm as people name it.
const sseName = (alg) => ({ "aws:kms": "SSE-KMS", AES256: "SSE-S3" })[alg] || alg;

function setVersioning(bucket, status) {
  return xmlPut(bucket, undefined, "versioning", `<VersioningConfiguration ${XMLNS}><Status>${status}</Status></VersioningConfiguration>`);
}

function setDefaultEncryption(bucket, algorithm, kmsKey) {
  const key = algorithm === "aws:kms" && kmsKey ? `<KMSMasterKeyID>${esc(kmsKey)}</KMSMasterKeyID>` : "";
  return xmlPut(bucket, undefined, "encryption", `<ServerSideEncryptionConfiguration ${XMLNS}><Rule><ApplyServerSideEncryptionByDefault>` +
    `<SSEAlgorithm>${esc(algorithm)}</SSEAlgorithm>${key}</ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>`);
}

// A bucket's settings: versioning (which can be switched here), object lock and default
// encryption. A setting the caller may not read says so rather than hiding the card.
async function settingsCard(bucket) {
  const card = h("div", { class: "card", id: "bucket-settings" }, h("h2", {}, "Settings"));
  const dl = h("dl", { class: "kv" });
  const err = errorBox();
  card.append(err, dl);
  const get = (sub) => api.s3Xml(api.s3Path(bucket), { query: { [sub]: "" } }).then((d) => ({ d }), (x) => ({ x }));
  const [ver, lock, enc] = await Promise.all([get("versioning"), get("object-lock"), get("encryption")]);
  const status = ver.d ? text(ver.d, "Status") || "Off" : null;
  const toggle = status && h("button", { type: "button", class: "secondary", id: "toggle-versioning", onclick: async () => {
    err.show(null);
    try { await setVersioning(bucket, status === "Enabled" ? "Suspended" : "Enabled"); card.replaceWith(await settingsCard(bucket)); }
    catch (x) { err.show(x); }
  } }, status === "Enabled" ? "Suspend" : "Enable");
  let lockText;
  if (lock.d) {
    const mode = text(lock.d, "DefaultRetention > Mode");
    const days = text(lock.d, "DefaultRetention > Days"), years = text(lock.d, "DefaultRetention > Years");
    lockText = mode ? `On; new objects kept ${days ? `${days} day(s)` : `${years} year(s)`} in ${mode} mode` : "On; no default retention";
  } else lockText = lock.x.code === "ObjectLockConfigurationNotFoundError" ? "Off" : `Unknown: ${lock.x.message}`;
  let encText;
  if (enc.d) {
    const key = text(enc.d, "KMSMasterKeyID");
    encText = sseName(text(enc.d, "SSEAlgorithm")) + (key ? ` with key ${key}` : "");
  } else encText = enc.x.code === "ServerSideEncryptionConfigurationNotFoundError" ? "None" : `Unknown: ${enc.x.message}`;
  dl.append(
    h("dt", {}, "Versioning"), h("dd", { id: "setting-versioning" }, status ?? `Unknown: ${ver.x.message}`, " ", toggle || null),
    h("dt", {}, "Object lock"), h("dd", { id: "setting-lock" }, lockText),
    h("dt", {}, "Default encryption"), h("dd", { id: "setting-encryption" }, encText));
  return card;
}

export async function bucketsView() {
  const err = errorBox();
  const body = h("tbody");
  const name = h("input", { id: "new-bucket", required: true, pattern: "[a-z0-9][a-z0-9.\\-]{1,61}[a-z0-9]",
    title: "3 to 63 lower-case letters, digits, dots and hyphens", spellcheck: "false", autocomplete: "off" });
  const versioning = h("input", { type: "checkbox", id: "new-versioning" });
  // What the other fields follow: object lock needs versioning; a KMS key only for SSE-KMS.
  const sync = () => {
    if (lock.checked) versioning.checked = true;
    versioning.disabled = lock.checked;
    kmsKey.hidden = encryption.value !== "aws:kms";
    kmsKey.required = !kmsKey.hidden;
  };
  const lock = h("input", { type: "checkbox", id: "new-lock", onchange: sync });
  const encryption = h("select", { id: "new-encryption", "aria-label": "Default encryption", onchange: sync },
    h("option", { value: "" }, "No default encryption"), h("option", { value: "AES256" }, "SSE-S3 (server keys)"),
    h("option", { value: "aws:kms" }, "SSE-KMS (a KMS key)"));
  const kmsKey = h("input", { id: "new-kms-key", placeholder: "KMS key id", "aria-label": "KMS key id", hidden: true, spellcheck: "false", autocomplete: "off" });
  const create = h("form", { class: "card row", "aria-label": "Create a bucket" },
    h("label", { for: "new-bucket", class: "inline" }, "New bucket"), name,
    h("label", { class: "inline" }, versioning, "Versioning"),
    h("label", { class: "inline", title: "Object lock needs versioning and cannot be turned off later" }, lock, "Object lock"),
    encryption, kmsKey,
    h("button", { type: "submit", id: "create-bucket" }, "Create bucket"));
  create.addEventListener("submit", async (e) => {
    e.preventDefault();
    err.show(null);
    const b = name.value.trim();
    try {
      await api.s3(api.s3Path(b), { method: "PUT", headers: lock.checked ? { "x-amz-bucket-object-lock-enabled": "true" } : {} });
      // The bucket exists from here on: a failed setting is reported, and the bucket is kept.
      try {
        if (versioning.checked && !lock.checked) await setVersioning(b, "Enabled");
        if (encryption.value) await setDefaultEncryption(b, encryption.value, kmsKey.value.trim());
      } catch (x) {
        await load();
        err.show(Object.assign(x, { message: `Bucket ${b} was created, but a setting was refused: ${x.message}` }));
        return;
      }
      toast(`Bucket ${b} created.`);
      create.reset();
      sync();
      await load();
    } catch (x) { err.show(x); }
  });

  async function load() {
    const doc = await api.s3Xml("/api/s3/");
    const buckets = [...doc.querySelectorAll("Buckets > Bucket")].map((b) => ({ name: text(b, "Name"), created: text(b, "CreationDate") }));
    body.replaceChildren(...buckets.map((b) => {
      const count = h("td", { class: "num" }, "…");
      const size = h("td", { class: "num" }, "…");
      const del = h("button", { type: "button", class: "secondary", "aria-label": `Delete bucket ${b.name}`,
        onclick: async () => {
          if (!confirm(`Delete the bucket ${b.name}? It must be empty.`)) return;
          err.show(null);
          try { await api.s3(api.s3Path(b.name), { method: "DELETE" }); toast(`Bucket ${b.name} deleted.`); await load(); }
          catch (x) { err.show(x); }
        } }, "Delete");
      bucketUsage(b.name).then((u) => {
        count.textContent = (u.more ? "≥ " : "") + u.count.toLocaleString();
        size.textContent = (u.more ? "≥ " : "") + fmtBytes(u.bytes);
      }, (x) => { count.textContent = "–"; size.textContent = "–"; count.title = x.message; });
      return h("tr", { "data-bucket": b.name },
        h("td", { class: "name" }, h("a", { href: bucketHash(b.name) }, b.name)),
        h("td", { class: "hide-narrow" }, fmtDate(b.created)), count, size, h("td", {}, del));
    }));
    if (!buckets.length) body.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No buckets yet: create one above.")));
  }

  setMain(h("h1", {}, "Buckets"), err, create,
    h("div", { class: "card" }, h("table", { "aria-label": "Buckets" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Name"), h("th", { scope: "col", class: "hide-narrow" }, "Created"),
        h("th", { scope: "col", class: "num" }, "Objects"), h("th", { scope: "col", class: "num" }, "Size"), h("th", { scope: "col" }, h("span", { class: "muted" }, "Actions")))),
      body)));
  try { await load(); } catch (x) { err.show(x); }
}

function download(bucket, key, versionId) {
  const a = h("a", { href: api.s3Path(bucket, key) + api.qs({ versionId }), download: key.split("/").pop() || "download" });
  document.body.append(a);
  a.click();
  a.remove();
}

export function shareDialog(bucket, key, versionId) {
  const err = errorBox();
  const expiry = h("select", { id: "share-expiry" },
    h("option", { value: "3600" }, "1 hour"), h("option", { value: "86400", selected: true }, "1 day"),
    h("option", { value: "604800" }, "7 days (the most SigV4 allows)"), h("option", { value: "300" }, "5 minutes"));
  const url = h("input", { id: "share-url", class: "share-url", readonly: true, "aria-label": "Share link" });
  const copy = h("button", { type: "button", class: "secondary", disabled: true, onclick: async () => {
    url.select();
    try { await navigator.clipboard.writeText(url.value); toast("Link copied."); }
    catch (_) { document.execCommand("copy"); toast("Link selected: copy it with Ctrl+C."); }
  } }, "Copy");
  const make = h("button", { type: "button", id: "share-make", onclick: async () => {
    err.show(null);
    try {
      const r = await api.presign(bucket, key, Number(expiry.value), versionId);
      url.value = r.url;
      copy.disabled = false;
      url.focus(); url.select();
    } catch (x) { err.show(x); }
  } }, "Create link");
  const close = h("button", { type: "button", class: "secondary", onclick: () => dlg.close() }, "Close");
  const dlg = h("dialog", { "aria-labelledby": "share-title" },
    h("h2", { id: "share-title" }, "Share ", h("span", { class: "name" }, key)),
    h("p", { class: "muted" }, "Anyone with the link can download the object until it expires. It is signed with your keys: it stops working if they are removed."),
    err, h("label", { for: "share-expiry" }, "Expires after"), h("div", { class: "row" }, expiry, make),
    h("label", { for: "share-url" }, "Link"), url, h("div", { class: "row" }, copy, h("span", { class: "spacer" }), close));
  dlg.addEventListener("close", () => dlg.remove());
  document.body.append(dlg);
  dlg.showModal();
  make.focus();
}

export async function objectsView(bucket, prefix) {
  const err = errorBox();
  const tokens = [null];
  let page = 0;
  const search = h("input", { id: "search", type: "search", placeholder: "Name starts with…", "aria-label": "Search by prefix in this folder", spellcheck: "false" });
  const body = h("tbody");
  const selectAll = h("input", { type: "checkbox", "aria-label": "Select all on this page" });
  const delSel = h("button", { type: "button", class: "danger", id: "delete-selected", disabled: true }, "Delete selected");
  const prev = h("button", { type: "button", class: "secondary", disabled: true }, "Previous");
  const next = h("button", { type: "button", class: "secondary", disabled: true }, "Next");
  const pageInfo = h("span", { class: "muted", "aria-live": "polite" });
  const uploads = h("ul", { class: "uploads", id: "uploads", "aria-label": "Uploads" });
  const picker = h("input", { type: "file", id: "file-input", multiple: true, "aria-label": "Choose files to upload" });
  const drop = h("div", { class: "drop", id: "drop-zone" }, "Drop files here to upload them to ",
    h("strong", {}, `${bucket}/${prefix}`), " — or ", picker);

  const selected = () => [...body.querySelectorAll("input[data-key]:checked")].map((c) => c.dataset.key);
  const refreshSel = () => { delSel.disabled = selected().length === 0; };
  selectAll.addEventListener("change", () => {
    for (const c of body.querySelectorAll("input[data-key]")) c.checked = selectAll.checked;
    refreshSel();
  });

  const startUpload = (files) => uploadFiles(bucket, prefix, [...files], uploads, () => load());
  picker.addEventListener("change", () => { startUpload(picker.files); picker.value = ""; });
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); startUpload(e.dataTransfer.files); });

  delSel.addEventListener("click", async () => {
    const keys = selected();
    if (!keys.length || !confirm(`Delete ${keys.length} object(s)?`)) return;
    err.show(null);
    const failed = [];
    const queue = [...keys];
    await Promise.all([0, 1, 2, 3].map(async () => {
      while (queue.length) {
        const k = queue.shift();
        try { await api.s3(api.s3Path(bucket, k), { method: "DELETE" }); } catch (x) { failed.push(`${k}: ${x.message}`); }
      }
    }));
    if (failed.length) err.show(new Error(`Not deleted: ${failed.join("; ")}`));
    else toast(`${keys.length} object(s) deleted.`);
    await load();
  });

  async function load() {
    err.show(null);
    const doc = await api.s3Xml(api.s3Path(bucket), { query: { "list-type": "2", delimiter: "/", prefix: prefix + search.value,
      "max-keys": String(PAGE), "continuation-token": tokens[page] } });
    const rows = [];
    for (const p of doc.querySelectorAll("CommonPrefixes > Prefix")) {
      const full = p.textContent;
      rows.push(h("tr", { "data-prefix": full }, h("td", {}),
        h("td", { class: "name" }, h("a", { href: bucketHash(bucket, full) }, h("span", { class: "folder-icon", "aria-hidden": "true" }), full.slice(prefix.length))),
        h("td", { class: "num" }, ""), h("td", { class: "hide-narrow" }, ""), h("td", {})));
    }
    for (const c of doc.querySelectorAll("Contents")) {
      const key = text(c, "Key");
      const check = h("input", { type: "checkbox", "data-key": key, "aria-label": `Select ${key}`, onchange: refreshSel });
      rows.push(h("tr", { "data-key": key }, h("td", {}, check),
        h("td", { class: "name" }, h("a", { href: objectHash(bucket, key) }, key.slice(prefix.length))),
        h("td", { class: "num" }, fmtBytes(Number(text(c, "Size")))),
        h("td", { class: "hide-narrow" }, fmtDate(text(c, "LastModified"))),
        h("td", {}, h("div", { class: "row" },
          h("button", { type: "button", class: "secondary", "aria-label": `Download ${key}`, onclick: () => download(bucket, key) }, "Download"),
          h("button", { type: "button", class: "secondary", "aria-label": `Share ${key}`, onclick: () => shareDialog(bucket, key) }, "Share")))));
    }
    if (!rows.length) rows.push(h("tr", {}, h("td", { colspan: 5, class: "muted" }, search.value ? "Nothing starts with that." : "This folder is empty.")));
    body.replaceChildren(...rows);
    selectAll.checked = false;
    refreshSel();
    const truncated = text(doc, "IsTruncated") === "true";
    tokens[page + 1] = truncated ? text(doc, "NextContinuationToken") : undefined;
    next.disabled = !truncated;
    prev.disabled = page === 0;
    pageInfo.textContent = `Page ${page + 1}`;
  }
  const safe = async () => { try { await load(); } catch (x) { err.show(x); } };
  next.addEventListener("click", () => { page++; safe(); });
  prev.addEventListener("click", () => { page = Math.max(0, page - 1); safe(); });
  let timer = null;
  search.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => { page = 0; tokens.length = 1; safe(); }, 250); });

  const crumbs = h("nav", { class: "crumbs", "aria-label": "Folder" }, h("a", { href: "#/buckets" }, "Buckets"), " / ",
    h("a", { href: bucketHash(bucket) }, bucket));
  let acc = "";
  for (const seg of prefix.split("/").filter(Boolean)) {
    acc += seg + "/";
    crumbs.append(" / ", h("a", { href: bucketHash(bucket, acc) }, seg));
  }
  const settings = h("div", {});
  setMain(crumbs, h("h1", {}, prefix ? prefix : bucket), err, settings,
    h("div", { class: "card" }, drop, uploads),
    h("div", { class: "card" },
      h("div", { class: "row" }, search, h("span", { class: "spacer" }), delSel,
        h("button", { type: "button", class: "secondary", onclick: safe }, "Refresh")),
      h("table", { "aria-label": "Objects" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, selectAll), h("th", { scope: "col" }, "Name"), h("th", { scope: "col", class: "num" }, "Size"),
          h("th", { scope: "col", class: "hide-narrow" }, "Modified"), h("th", { scope: "col" }, h("span", { class: "muted" }, "Actions")))),
        body),
      h("div", { class: "pager" }, prev, pageInfo, next)));
  if (!prefix) settingsCard(bucket).then((c) => settings.replaceChildren(c), () => {});
  await safe();
}

export async function detailsView(bucket, key) {
  const err = errorBox();
  const folder = key.includes("/") ? key.slice(0, key.lastIndexOf("/") + 1) : "";
  const crumbs = h("nav", { class: "crumbs", "aria-label": "Folder" }, h("a", { href: "#/buckets" }, "Buckets"), " / ",
    h("a", { href: bucketHash(bucket) }, bucket), folder ? [" / ", h("a", { href: bucketHash(bucket, folder) }, folder)] : null);
  const main = setMain(crumbs, h("h1", { class: "name" }, key.slice(folder.length)), err);
  let r;
  try { r = await api.s3(api.s3Path(bucket, key), { method: "HEAD", headers: { "x-amz-checksum-mode": "ENABLED" } }); }
  catch (x) { err.show(x.status === 404 ? new Error("The object does not exist (or was deleted).") : x); return; }
  const hd = r.headers;
  const kv = (k, v) => (v ? [h("dt", {}, k), h("dd", {}, v)] : []);
  const meta = [], sums = [];
  for (const [k, v] of hd.entries()) {
    if (k.startsWith("x-amz-meta-")) meta.push(...kv(k.slice(11), v));
    if (k.startsWith("x-amz-checksum-") && k !== "x-amz-checksum-type") sums.push(...kv(k.slice(15).toUpperCase(), v));
  }
  const size = Number(hd.get("content-length"));
  main.append(h("div", { class: "row" },
      h("button", { type: "button", id: "download", onclick: () => download(bucket, key) }, "Download"),
      h("button", { type: "button", class: "secondary", id: "share", onclick: () => shareDialog(bucket, key) }, "Share link"),
      h("button", { type: "button", class: "danger", id: "delete", onclick: async () => {
        if (!confirm(`Delete ${key}?`)) return;
        try { await api.s3(api.s3Path(bucket, key), { method: "DELETE" }); toast(`${key} deleted.`); location.hash = bucketHash(bucket, folder); }
        catch (x) { err.show(x); }
      } }, "Delete")),
    h("div", { class: "card" }, h("h2", {}, "Object"), h("dl", { class: "kv", id: "object-details" },
      kv("Key", key), kv("Size", `${fmtBytes(size)} (${size.toLocaleString()} bytes)`), kv("ETag", hd.get("etag")),
      kv("Content type", hd.get("content-type")), kv("Last modified", fmtDate(hd.get("last-modified"))),
      kv("Version", hd.get("x-amz-version-id")), kv("Storage class", hd.get("x-amz-storage-class") || "STANDARD"),
      kv("Checksum type", hd.get("x-amz-checksum-type")), kv("Encryption", encryptionOf(hd)),
      kv("Retention", hd.get("x-amz-object-lock-mode") && `${hd.get("x-amz-object-lock-mode")} until ${fmtDate(hd.get("x-amz-object-lock-retain-until-date"))}`),
      kv("Legal hold", hd.get("x-amz-object-lock-legal-hold")))),
    h("div", { class: "card" }, h("h2", {}, "Metadata"), meta.length ? h("dl", { class: "kv" }, meta) : h("p", { class: "muted" }, "No user metadata.")),
    h("div", { class: "card" }, h("h2", {}, "Checksums"), sums.length ? h("dl", { class: "kv" }, sums) : h("p", { class: "muted" }, "No stored checksum besides the ETag.")));
  main.append(await tagsCard(bucket, key));
  const versions = h("div", { class: "card" }, h("h2", {}, "Versions"));
  main.append(versions);
  try {
    const doc = await api.s3Xml(api.s3Path(bucket), { query: { versions: "", prefix: key, "max-keys": "100" } });
    const rows = [...doc.querySelectorAll("Version, DeleteMarker")].filter((v) => text(v, "Key") === key).map((v) => {
      const id = text(v, "VersionId");
      const marker = v.tagName === "DeleteMarker";
      return h("tr", {}, h("td", { class: "name" }, id, text(v, "IsLatest") === "true" ? h("span", { class: "badge ok" }, " latest") : null),
        h("td", {}, marker ? h("span", { class: "badge warn" }, "delete marker") : fmtBytes(Number(text(v, "Size")))),
        h("td", { class: "hide-narrow" }, fmtDate(text(v, "LastModified"))),
        h("td", {}, marker ? null : h("button", { type: "button", class: "secondary", onclick: () => download(bucket, key, id === "null" ? undefined : id) }, "Download")));
    });
    versions.append(rows.length > 1 || (rows.length === 1 && hd.get("x-amz-version-id"))
      ? h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Version"), h("th", {}, "Size"), h("th", { class: "hide-narrow" }, "Modified"), h("th", {}, ""))), h("tbody", {}, rows))
      : h("p", { class: "muted" }, "One version (versioning is off for this bucket, or the object was never overwritten)."));
  } catch (x) { versions.append(h("p", { class: "muted" }, `Versions cannot be listed: ${x.message}`)); }
}

function encryptionOf(hd) {
  if (hd.get("x-amz-server-side-encryption-customer-algorithm")) return "SSE-C (customer key)";
  const alg = hd.get("x-amz-server-side-encryption");
  if (alg !== "aws:kms") return alg && sseName(alg);
  return `${sseName(alg)}, key ${hd.get("x-amz-server-side-encryption-aws-kms-key-id") || "default"}`;
}

// An object's tags (at most 10, as S3 allows), shown and edited as `key=value` lines.
async function tagsCard(bucket, key) {
  const err = errorBox();
  const area = h("textarea", { id: "tags", class: "code", rows: 4, spellcheck: "false", "aria-label": "Tags, one key=value per line" });
  const card = h("div", { class: "card", id: "object-tags" }, h("h2", {}, "Tags"), err);
  try {
    const doc = await api.s3Xml(api.s3Path(bucket, key), { query: { tagging: "" } });
    area.value = [...doc.querySelectorAll("TagSet > Tag")].map((t) => `${text(t, "Key")}=${text(t, "Value")}`).join("\n");
  } catch (x) {
    card.append(h("p", { class: "muted" }, `Tags cannot be read: ${x.message}`));
    return card;
  }
  const save = h("button", { type: "button", id: "save-tags", onclick: async () => {
    err.show(null);
    const lines = area.value.split("\n").map((l) => l.trim()).filter(Boolean);
    const bad = lines.find((l) => !l.includes("=") || l.startsWith("="));
    if (bad) { err.show(new Error(`Write each tag as key=value: "${bad}" is not.`)); return; }
    const tags = lines.map((l) => { const i = l.indexOf("="); return `<Tag><Key>${esc(l.slice(0, i).trim())}</Key><Value>${esc(l.slice(i + 1).trim())}</Value></Tag>`; });
    try {
      if (tags.length) await xmlPut(bucket, key, "tagging", `<Tagging ${XMLNS}><TagSet>${tags.join("")}</TagSet></Tagging>`);
      else await api.s3(api.s3Path(bucket, key), { method: "DELETE", query: { tagging: "" } });
      toast(tags.length ? `${tags.length} tag(s) saved.` : "Tags removed.");
    } catch (x) { err.show(x); }
  } }, "Save tags");
  card.append(area, h("div", { class: "row" }, h("span", { class: "muted" }, "One key=value per line; at most 10."), h("span", { class: "spacer" }), save));
  return card;
}
