// Calls to the console server: sign-in, and S3 calls that it signs as the signed-in user.
// The secret key goes to the server once, in the sign-in form, and is never kept here.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code || "";
  }
}

let csrf = "";
let onExpired = () => {};

export function setExpiredHandler(f) { onExpired = f; }

// A key as S3 wants it in a path: every segment percent-encoded, slashes kept.
export function encodeKey(key) {
  return key.split("/").map(encodeURIComponent).join("/");
}

export function s3Path(bucket, key) {
  let p = "/api/s3/" + encodeURIComponent(bucket);
  if (key !== undefined && key !== null) p += "/" + encodeKey(key);
  return p;
}

function qs(query) {
  if (!query) return "";
  const parts = [];
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null) continue;
    parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v));
  }
  return parts.length ? "?" + parts.join("&") : "";
}

async function errorOf(r) {
  const text = await r.text().catch(() => "");
  if (text.startsWith("{")) {
    try {
      const j = JSON.parse(text);
      if (r.status === 401 && j.code === "SessionExpired") onExpired(j.message);
      return new ApiError(r.status, j.code, j.message);
    } catch (_) { /* fall through */ }
  }
  if (text.includes("<Error>")) {
    const doc = new DOMParser().parseFromString(text, "application/xml");
    const t = (n) => doc.querySelector(n)?.textContent || "";
    return new ApiError(r.status, t("Code"), t("Message") || t("Code"));
  }
  const known = { 403: "Access denied", 404: "Not found", 409: "Conflict", 503: "Service unavailable" };
  return new ApiError(r.status, "", known[r.status] || `The server answered ${r.status}.`);
}

async function json(method, url, body) {
  const headers = { "X-Quarry-Csrf": csrf };
  const init = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(url, init);
  if (!r.ok) throw await errorOf(r);
  return r.json();
}

export async function session() {
  const s = await json("GET", "/api/session");
  csrf = s.csrf;
  return s;
}

export async function login(accessKey, secretKey, sessionToken) {
  const s = await json("POST", "/api/login", { accessKey, secretKey, sessionToken: sessionToken || null });
  csrf = s.csrf;
  return s;
}

export async function logout() {
  try { await json("POST", "/api/logout"); } finally { csrf = ""; }
}

export function presign(bucket, key, expires, versionId) {
  return json("POST", "/api/presign", { bucket, key, expires, versionId: versionId || null });
}

// One S3 call through the console: {method, query, headers, body}. Returns the Response.
export async function s3(path, { method = "GET", query, headers = {}, body } = {}) {
  const h = { ...headers };
  if (method !== "GET" && method !== "HEAD") h["X-Quarry-Csrf"] = csrf;
  const r = await fetch(path + qs(query), { method, headers: h, body, credentials: "same-origin" });
  if (!r.ok) throw await errorOf(r);
  return r;
}

export async function s3Xml(path, opts) {
  const r = await s3(path, opts);
  const text = await r.text();
  return new DOMParser().parseFromString(text, "application/xml");
}

// One IAM query API call (`aws iam <action>`), as the signed-in user: the answer's XML document.
export async function iam(action, params = {}) {
  const form = new URLSearchParams({ Action: action, Version: "2010-05-08" });
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) form.append(k, v);
  const r = await fetch("/api/iam", {
    method: "POST", credentials: "same-origin", body: form,
    headers: { "X-Quarry-Csrf": csrf, "Content-Type": "application/x-www-form-urlencoded; charset=utf-8" },
  });
  if (!r.ok) throw await errorOf(r);
  return new DOMParser().parseFromString(await r.text(), "application/xml");
}

// One admin API call (`/quarry/admin/v1/<call>`: root only) as the signed-in user.
export function admin(call, opts) {
  return s3("/api/s3/quarry/admin/v1/" + call, opts);
}

export async function adminJson(call, opts) {
  const r = await admin(call, opts);
  return r.json();
}

// A PUT with upload progress (fetch has none): resolves with the response's headers.
export function putWithProgress(url, body, headers, onProgress, signal) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open("PUT", url);
    x.setRequestHeader("X-Quarry-Csrf", csrf);
    for (const [k, v] of Object.entries(headers || {})) x.setRequestHeader(k, v);
    x.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded); };
    x.onload = async () => {
      if (x.status >= 200 && x.status < 300) {
        resolve({ etag: x.getResponseHeader("ETag") });
      } else {
        const r = new Response(x.responseText, { status: x.status });
        reject(await errorOf(r));
      }
    };
    x.onerror = () => reject(new ApiError(0, "NetworkError", "The connection to the console failed."));
    x.onabort = () => reject(new ApiError(0, "Aborted", "Cancelled."));
    if (signal) signal.addEventListener("abort", () => x.abort());
    x.send(body);
  });
}

export { qs };
