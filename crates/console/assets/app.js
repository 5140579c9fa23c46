// The console's entry: the session, the sign-in form, and the hash routes.
import * as api from "./api.js";
import { h, setMain, errorBox } from "./ui.js";
import { bucketsView, objectsView, detailsView } from "./objects.js";
import { clusterView, leaveCluster } from "./cluster.js";
import { usersView, userView, groupsView, groupView, policiesView, policyView } from "./identity.js";

let me = null;

function loginView(reason) {
  document.getElementById("top").hidden = true;
  const err = errorBox();
  const ak = h("input", { id: "access-key", name: "accessKey", autocomplete: "username", required: true, spellcheck: "false" });
  const sk = h("input", { id: "secret-key", name: "secretKey", type: "password", autocomplete: "current-password", required: true });
  const tok = h("input", { id: "session-token", name: "sessionToken", autocomplete: "off", spellcheck: "false" });
  const submit = h("button", { type: "submit", id: "signin" }, "Sign in");
  const form = h("form", { class: "card login", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title" }, "Sign in to Quarry"),
    reason ? h("p", { class: "muted" }, reason) : null,
    err,
    h("label", { for: "access-key" }, "Access key"), ak,
    h("label", { for: "secret-key" }, "Secret key"), sk,
    h("details", {}, h("summary", {}, "Temporary credentials (STS)"),
      h("label", { for: "session-token" }, "Session token"), tok),
    submit);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    submit.disabled = true;
    err.show(null);
    try {
      me = await api.login(ak.value.trim(), sk.value, tok.value.trim());
      sk.value = "";
      start();
    } catch (x) {
      err.show(x);
      sk.value = "";
      sk.focus();
    } finally {
      submit.disabled = false;
    }
  });
  setMain(form);
  ak.focus();
}

const IDENTITY = ["users", "groups", "policies"];

function markNav(route) {
  const section = route === "cluster" ? "nav-cluster" : IDENTITY.includes(route) ? "nav-identity" : "nav-buckets";
  for (const id of ["nav-buckets", "nav-identity", "nav-cluster"]) {
    const a = document.getElementById(id);
    if (id === section) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
}

async function route() {
  if (!me) return;
  const hash = location.hash.replace(/^#\/?/, "");
  const [view, ...rest] = hash.split("/");
  if (view !== "cluster") leaveCluster();
  markNav(view);
  try {
    const name = rest.length ? decodeURIComponent(rest.join("/")) : "";
    if (view === "cluster") await clusterView();
    else if (view === "users") await (name ? userView(name) : usersView());
    else if (view === "groups") await (name ? groupView(name) : groupsView());
    else if (view === "policies") await (name ? policyView(name) : policiesView());
    else if (view === "b" && rest.length >= 1) await objectsView(decodeURIComponent(rest[0]), decodeURIComponent(rest.slice(1).join("/") || ""));
    else if (view === "o" && rest.length >= 2) await detailsView(decodeURIComponent(rest[0]), decodeURIComponent(rest.slice(1).join("/")));
    else await bucketsView();
  } catch (x) {
    const err = errorBox();
    err.show(x);
    setMain(h("h1", {}, "Something went wrong"), err);
  }
  const main = document.getElementById("main");
  if (document.activeElement === document.body) main.focus({ preventScroll: true });
}

function start() {
  document.getElementById("top").hidden = false;
  document.getElementById("who").textContent = me.accessKey;
  route();
}

api.setExpiredHandler((message) => {
  me = null;
  leaveCluster();
  loginView(message || "Your session expired: sign in again.");
});

document.getElementById("signout").addEventListener("click", async () => {
  try { await api.logout(); } catch (_) { /* signed out either way */ }
  me = null;
  leaveCluster();
  loginView("Signed out.");
});

window.addEventListener("hashchange", route);

(async () => {
  try {
    me = await api.session();
    start();
  } catch (_) {
    loginView();
  }
})();
