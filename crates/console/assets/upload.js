// Uploads with a progress bar per file: one PUT for small files, a multipart upload with
// parallel parts for large ones. A part that fails is retried; if it keeps failing, the upload
// stops with a Resume button that sends only the parts still missing (same upload id).
import * as api from "./api.js";
import { h, fmtBytes, toast } from "./ui.js";

const MULTIPART_FROM = 8 * 1024 * 1024;
const PART = 8 * 1024 * 1024;
const PARALLEL = 3;
const TRIES = 3;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function partSize(size) {
  // S3 allows 10,000 parts.
  return Math.max(PART, Math.ceil(size / 10000 / (1024 * 1024)) * 1024 * 1024);
}

class Upload {
  constructor(bucket, key, file, li, onDone) {
    Object.assign(this, { bucket, key, file, li, onDone });
    this.uploadId = null;
    this.etags = new Map();
    this.loaded = new Map();
    this.abort = new AbortController();
  }

  set(state, message) {
    this.li.dataset.state = state;
    this.status.textContent = message;
  }

  progress() {
    let sent = 0;
    for (const v of this.loaded.values()) sent += v;
    const size = this.file.size;
    const pct = size ? Math.min(100, Math.floor((sent * 100) / size)) : 100;
    this.bar.value = size ? sent : 1;
    this.pct.textContent = `${pct}%`;
  }

  async run() {
    this.resume.hidden = true;
    try {
      if (this.file.size < MULTIPART_FROM) await this.single();
      else await this.multipart();
      this.loaded.set(0, this.file.size);
      for (const k of [...this.loaded.keys()]) if (k !== 0) this.loaded.delete(k);
      this.progress();
      this.set("done", "Done");
      this.cancel.hidden = true;
      this.onDone();
    } catch (x) {
      if (x.code === "Aborted") return;
      this.set("failed", `Failed: ${x.message}${x.code ? ` (${x.code})` : ""}`);
      this.resume.hidden = !this.uploadId;
      if (!this.uploadId) { this.resume.hidden = false; }
      toast(`Upload of ${this.key} failed: ${x.message}`, true);
    }
  }

  async single() {
    this.set("uploading", "Uploading");
    await api.putWithProgress(api.s3Path(this.bucket, this.key), this.file,
      { "Content-Type": this.file.type || "application/octet-stream" },
      (n) => { this.loaded.set(1, n); this.progress(); }, this.abort.signal);
  }

  async multipart() {
    const size = this.file.size;
    const ps = partSize(size);
    const parts = Math.ceil(size / ps);
    if (!this.uploadId) {
      this.set("uploading", "Starting multipart upload");
      const doc = await api.s3Xml(api.s3Path(this.bucket, this.key), { method: "POST", query: { uploads: "" },
        headers: { "Content-Type": this.file.type || "application/octet-stream" } });
      this.uploadId = doc.querySelector("UploadId")?.textContent;
      if (!this.uploadId) throw new Error("The server sent no upload id.");
    }
    const todo = [];
    for (let n = 1; n <= parts; n++) if (!this.etags.has(n)) todo.push(n);
    this.set("uploading", `Uploading ${parts} parts of ${fmtBytes(ps)}, ${PARALLEL} at a time`);
    let failure = null;
    const worker = async () => {
      while (todo.length && !failure) {
        const n = todo.shift();
        const blob = this.file.slice((n - 1) * ps, Math.min(size, n * ps));
        for (let attempt = 1; ; attempt++) {
          try {
            const url = api.s3Path(this.bucket, this.key) + api.qs({ partNumber: n, uploadId: this.uploadId });
            const r = await api.putWithProgress(url, blob, {}, (b) => { this.loaded.set(n, b); this.progress(); }, this.abort.signal);
            this.etags.set(n, r.etag);
            this.loaded.set(n, blob.size);
            this.progress();
            break;
          } catch (x) {
            this.loaded.set(n, 0);
            if (x.code === "Aborted" || attempt >= TRIES || (x.status >= 400 && x.status < 500)) {
              failure = failure || Object.assign(x, { message: `part ${n}: ${x.message}` });
              break;
            }
            await sleep(500 * 2 ** attempt);
          }
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL, todo.length) }, worker));
    if (failure) throw failure;
    this.set("uploading", "Completing");
    const xml = "<CompleteMultipartUpload>" + [...this.etags.entries()].sort((a, b) => a[0] - b[0])
      .map(([n, e]) => `<Part><PartNumber>${n}</PartNumber><ETag>${e}</ETag></Part>`).join("") + "</CompleteMultipartUpload>";
    const doc = await api.s3Xml(api.s3Path(this.bucket, this.key), { method: "POST", query: { uploadId: this.uploadId },
      headers: { "Content-Type": "application/xml" }, body: xml });
    // CompleteMultipartUpload can fail inside a 200 answer.
    if (doc.querySelector("Error")) throw new api.ApiError(200, doc.querySelector("Code")?.textContent, doc.querySelector("Message")?.textContent);
    this.uploadId = null;
  }

  async stop() {
    this.abort.abort();
    if (this.uploadId) {
      try { await api.s3(api.s3Path(this.bucket, this.key), { method: "DELETE", query: { uploadId: this.uploadId } }); } catch (_) { /* expires anyway */ }
    }
    this.set("cancelled", "Cancelled");
    this.resume.hidden = true;
    this.cancel.hidden = true;
  }
}

export function uploadFiles(bucket, prefix, files, list, onDone) {
  for (const file of files) {
    const key = prefix + file.name;
    const li = h("li", { "data-key": key });
    const u = new Upload(bucket, key, file, li, onDone);
    u.bar = h("progress", { max: String(file.size || 1), value: "0", "aria-label": `Upload progress of ${file.name}` });
    u.pct = h("span", { class: "pct" }, "0%");
    u.status = h("span", { class: "status muted" }, "Waiting");
    u.resume = h("button", { type: "button", class: "secondary", hidden: true, onclick: () => { u.abort = new AbortController(); u.run(); } }, "Resume");
    u.cancel = h("button", { type: "button", class: "secondary", onclick: () => u.stop() }, "Cancel");
    li.append(h("span", { class: "name" }, `${file.name} (${fmtBytes(file.size)})`),
      h("span", { class: "row" }, u.bar, u.pct), h("span", { class: "row" }, u.status, u.resume, u.cancel));
    list.append(li);
    u.run();
  }
}
