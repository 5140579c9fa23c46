// Identity: users, their access keys, groups and policies, through the IAM query API (the same
// calls as `aws iam ...`), signed as the signed-in user: the server decides what it may see and do.
import * as api from "./api.js";
import { h, fmtDate, toast, errorBox, setMain } from "./ui.js";

const text = (el, sel) => el.querySelector(sel)?.textContent ?? "";
const members = (doc, sel) => [...doc.querySelectorAll(sel)];
const ARN_POLICY = (name) => `arn:aws:iam::000000000000:policy/${name}`;
export const userHash = (u) => `#/users/${encodeURIComponent(u)}`;
export const groupHash = (g) => `#/groups/${encodeURIComponent(g)}`;
export const policyHash = (p) => `#/policies/${encodeURIComponent(p)}`;

// A page's title with the identity sections as tabs.
function tabs(current) {
  const link = (id, label, hash) => h("a", { href: hash, "aria-current": current === id ? "page" : null }, label);
  return h("nav", { class: "tabs", "aria-label": "Identity" },
    link("users", "Users", "#/users"), link("groups", "Groups", "#/groups"), link("policies", "Policies", "#/policies"));
}

const table = (label, head, body) => h("table", { "aria-label": label },
  h("thead", {}, h("tr", {}, head.map((c) => h("th", { scope: "col" }, c)))), body);

const empty = (cols, message) => h("tr", {}, h("td", { colspan: cols, class: "muted" }, message));

// A form of one text field and a button.
function oneField(id, label, button, pattern, onSubmit) {
  const input = h("input", { id, required: true, pattern, spellcheck: "false", autocomplete: "off" });
  const form = h("form", { class: "card row", "aria-label": button },
    h("label", { for: id, class: "inline" }, label), input, h("button", { type: "submit", id: `${id}-submit` }, button));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    await onSubmit(input.value.trim());
    input.value = "";
  });
  return form;
}

// Runs `f`; shows what the server said in `err` if it fails. Returns whether it worked.
async function attempt(err, f) {
  err.show(null);
  try { await f(); return true; } catch (x) { err.show(x); return false; }
}

const NAME = "[\\w+=,.@\\-]{1,64}";

export async function usersView() {
  const err = errorBox();
  const body = h("tbody");
  async function load() {
    const doc = await api.iam("ListUsers");
    const users = members(doc, "Users > member").map((u) => ({ name: text(u, "UserName"), created: text(u, "CreateDate") }));
    body.replaceChildren(...users.map((u) => h("tr", { "data-user": u.name },
      h("td", { class: "name" }, h("a", { href: userHash(u.name) }, u.name)),
      h("td", { class: "hide-narrow" }, fmtDate(u.created)))));
    if (!users.length) body.append(empty(2, "No users yet: the root user is the only identity."));
  }
  const create = oneField("new-user", "New user", "Create user", NAME, (name) => attempt(err, async () => {
    await api.iam("CreateUser", { UserName: name });
    toast(`User ${name} created.`);
    location.hash = userHash(name);
  }));
  setMain(h("h1", {}, "Users"), tabs("users"), err, create,
    h("div", { class: "card" }, table("Users", ["Name", h("span", { class: "hide-narrow" }, "Created")], body)));
  await attempt(err, load);
}

// The secret of a new key, shown once.
function secretDialog(keyId, secret) {
  const close = h("button", { type: "button", onclick: () => dlg.close() }, "I have saved it");
  const dlg = h("dialog", { "aria-labelledby": "secret-title", id: "new-key" },
    h("h2", { id: "secret-title" }, "New access key"),
    h("p", {}, "The secret is shown now and never again: save it somewhere safe."),
    h("dl", { class: "kv" }, h("dt", {}, "Access key"), h("dd", { id: "new-key-id" }, keyId),
      h("dt", {}, "Secret key"), h("dd", { id: "new-key-secret" }, secret)),
    h("div", { class: "row" }, h("span", { class: "spacer" }), close));
  dlg.addEventListener("close", () => dlg.remove());
  document.body.append(dlg);
  dlg.showModal();
  close.focus();
}

// A select of names with an "add" button; `choices` are loaded when the page is.
function picker(id, label, button, choices, onPick) {
  const sel = h("select", { id, "aria-label": label }, h("option", { value: "" }, `${label}…`),
    choices.map((c) => h("option", { value: c }, c)));
  const go = h("button", { type: "button", class: "secondary", id: `${id}-add`, onclick: async () => {
    if (sel.value) await onPick(sel.value);
  } }, button);
  return h("div", { class: "row" }, sel, go);
}

// A JSON policy editor: checks the text is JSON before sending; the server's MalformedPolicy
// message says what is wrong with a policy that parses.
function policyEditor(id, initial) {
  const area = h("textarea", { id, rows: 14, spellcheck: "false", class: "code", "aria-label": "Policy document (JSON)" });
  area.value = initial || JSON.stringify({
    Version: "2012-10-17",
    Statement: [{ Effect: "Allow", Action: ["s3:GetObject"], Resource: ["arn:aws:s3:::bucket/*"] }],
  }, null, 2);
  area.documentText = () => {
    try { JSON.parse(area.value); } catch (x) { throw new Error(`The document is not JSON: ${x.message}`); }
    return area.value;
  };
  return area;
}

function pretty(doc) {
  try { return JSON.stringify(JSON.parse(doc), null, 2); } catch (_) { return doc; }
}

export async function userView(name) {
  const err = errorBox();
  const main = setMain(h("nav", { class: "crumbs", "aria-label": "Identity" }, h("a", { href: "#/users" }, "Users"), " / ", name),
    h("h1", { class: "name" }, name), tabs("users"), err);
  let user;
  try { user = await api.iam("GetUser", { UserName: name }); } catch (x) { err.show(x); return; }
  const [allPolicies, allGroups] = await Promise.all([
    api.iam("ListPolicies").then((d) => members(d, "Policies > member").map((p) => text(p, "PolicyName")), () => []),
    api.iam("ListGroups").then((d) => members(d, "Groups > member").map((g) => text(g, "GroupName")), () => []),
  ]);
  const reload = () => userView(name);

  const keys = h("tbody");
  const keysDoc = await api.iam("ListAccessKeys", { UserName: name }).catch((x) => { err.show(x); return null; });
  for (const k of keysDoc ? members(keysDoc, "AccessKeyMetadata > member") : []) {
    const id = text(k, "AccessKeyId");
    const active = text(k, "Status") === "Active";
    keys.append(h("tr", { "data-key": id },
      h("td", { class: "name" }, id), h("td", {}, h("span", { class: `badge ${active ? "ok" : "warn"}` }, active ? "active" : "inactive")),
      h("td", { class: "hide-narrow" }, fmtDate(text(k, "CreateDate"))),
      h("td", {}, h("div", { class: "row" },
        h("button", { type: "button", class: "secondary", onclick: () => attempt(err, async () => {
          await api.iam("UpdateAccessKey", { UserName: name, AccessKeyId: id, Status: active ? "Inactive" : "Active" });
          toast(`Key ${id} ${active ? "disabled" : "enabled"}.`);
          await reload();
        }) }, active ? "Disable" : "Enable"),
        h("button", { type: "button", class: "danger", onclick: () => confirm(`Delete the key ${id}? Clients using it stop working.`) && attempt(err, async () => {
          await api.iam("DeleteAccessKey", { UserName: name, AccessKeyId: id });
          toast(`Key ${id} deleted.`);
          await reload();
        }) }, "Delete")))));
  }
  if (!keys.children.length) keys.append(empty(4, "No access keys: the user cannot sign requests."));
  const newKey = h("button", { type: "button", id: "create-key", onclick: () => attempt(err, async () => {
    const d = await api.iam("CreateAccessKey", { UserName: name });
    secretDialog(text(d, "AccessKey > AccessKeyId"), text(d, "AccessKey > SecretAccessKey"));
    await reload();
  }) }, "Create access key");

  const attached = h("tbody");
  const attDoc = await api.iam("ListAttachedUserPolicies", { UserName: name }).catch((x) => { err.show(x); return null; });
  const attachedNames = attDoc ? members(attDoc, "AttachedPolicies > member").map((p) => text(p, "PolicyName")) : [];
  for (const p of attachedNames) {
    attached.append(h("tr", { "data-policy": p }, h("td", { class: "name" }, h("a", { href: policyHash(p) }, p)),
      h("td", {}, h("button", { type: "button", class: "secondary", onclick: () => attempt(err, async () => {
        await api.iam("DetachUserPolicy", { UserName: name, PolicyArn: ARN_POLICY(p) });
        toast(`Policy ${p} detached.`);
        await reload();
      }) }, "Detach"))));
  }
  if (!attachedNames.length) attached.append(empty(2, "No managed policies attached."));
  const attach = picker("attach-policy", "Policy", "Attach", allPolicies.filter((p) => !attachedNames.includes(p)), (p) => attempt(err, async () => {
    await api.iam("AttachUserPolicy", { UserName: name, PolicyArn: ARN_POLICY(p) });
    toast(`Policy ${p} attached.`);
    await reload();
  }));

  const inline = h("div");
  const inDoc = await api.iam("ListUserPolicies", { UserName: name }).catch(() => null);
  for (const pn of inDoc ? members(inDoc, "PolicyNames > member").map((m) => m.textContent) : []) {
    const d = await api.iam("GetUserPolicy", { UserName: name, PolicyName: pn }).catch(() => null);
    const docText = d ? decodeURIComponent(text(d, "PolicyDocument")) : "";
    inline.append(h("details", { "data-inline": pn }, h("summary", {}, pn),
      h("pre", { class: "code" }, pretty(docText)),
      h("button", { type: "button", class: "secondary", onclick: () => attempt(err, async () => {
        await api.iam("DeleteUserPolicy", { UserName: name, PolicyName: pn });
        toast(`Inline policy ${pn} deleted.`);
        await reload();
      }) }, "Delete")));
  }
  const inlineName = h("input", { id: "inline-name", pattern: NAME, spellcheck: "false", autocomplete: "off", placeholder: "Policy name" });
  const inlineDoc = policyEditor("inline-doc");
  const inlineSave = h("button", { type: "button", id: "inline-save", onclick: () => attempt(err, async () => {
    if (!inlineName.value.trim()) throw new Error("Name the inline policy.");
    await api.iam("PutUserPolicy", { UserName: name, PolicyName: inlineName.value.trim(), PolicyDocument: inlineDoc.documentText() });
    toast(`Inline policy ${inlineName.value.trim()} saved.`);
    await reload();
  }) }, "Save inline policy");

  const groups = h("tbody");
  const gDoc = await api.iam("ListGroupsForUser", { UserName: name }).catch(() => null);
  const inGroups = gDoc ? members(gDoc, "Groups > member").map((g) => text(g, "GroupName")) : [];
  for (const g of inGroups) {
    groups.append(h("tr", { "data-group": g }, h("td", { class: "name" }, h("a", { href: groupHash(g) }, g)),
      h("td", {}, h("button", { type: "button", class: "secondary", onclick: () => attempt(err, async () => {
        await api.iam("RemoveUserFromGroup", { UserName: name, GroupName: g });
        toast(`Removed from ${g}.`);
        await reload();
      }) }, "Remove"))));
  }
  if (!inGroups.length) groups.append(empty(2, "Not in any group."));
  const join = picker("join-group", "Group", "Add to group", allGroups.filter((g) => !inGroups.includes(g)), (g) => attempt(err, async () => {
    await api.iam("AddUserToGroup", { UserName: name, GroupName: g });
    toast(`Added to ${g}.`);
    await reload();
  }));

  const accounts = await serviceAccountsPart(name, reload);
  const state = (enabled) => h("button", { type: "button", class: enabled ? "secondary" : "danger", id: enabled ? "enable-user" : "disable-user",
    onclick: () => attempt(err, async () => {
      await api.admin(enabled ? "users/enable" : "users/disable", { method: "POST", query: { user: name } });
      toast(enabled ? `${name} can sign in again.` : `${name} is disabled: its keys, service accounts and sessions are refused.`);
    }) }, enabled ? "Enable user" : "Disable user");

  const remove = h("button", { type: "button", class: "danger", id: "delete-user", onclick: () => confirm(`Delete the user ${name}?`) && attempt(err, async () => {
    await api.iam("DeleteUser", { UserName: name });
    toast(`User ${name} deleted.`);
    location.hash = "#/users";
  }) }, "Delete user");

  main.append(
    h("div", { class: "card" }, h("dl", { class: "kv", id: "user-details" },
      h("dt", {}, "ARN"), h("dd", {}, text(user, "User > Arn")),
      h("dt", {}, "User id"), h("dd", {}, text(user, "User > UserId")),
      h("dt", {}, "Created"), h("dd", {}, fmtDate(text(user, "User > CreateDate"))))),
    h("h2", {}, "Access keys"), h("div", { class: "card" }, table("Access keys", ["Key", "State", h("span", { class: "hide-narrow" }, "Created"), ""], keys), newKey),
    h("h2", {}, "Managed policies"), h("div", { class: "card" }, table("Attached policies", ["Policy", ""], attached), attach),
    h("h2", {}, "Inline policies"), h("div", { class: "card", id: "inline-policies" }, inline,
      h("label", { for: "inline-name" }, "Add or replace an inline policy"), inlineName, inlineDoc, h("div", { class: "row" }, inlineSave)),
    h("h2", {}, "Groups"), h("div", { class: "card" }, table("Groups", ["Group", ""], groups), join),
    h("h2", {}, "Service accounts"), accounts,
    h("div", { class: "row" }, h("span", { class: "muted" }, "A user is deleted once its keys, policies and group memberships are gone."), h("span", { class: "spacer" }), state(true), state(false), remove));
}

// A user's service accounts (the admin API: root only): keys that act as the user, narrowed by
// their own policy when they have one, until their expiry when they have one.
async function serviceAccountsPart(user, reload) {
  const err = errorBox();
  const card = h("div", { class: "card", id: "service-accounts" }, err);
  let list;
  try {
    list = (await api.adminJson("service-accounts", { query: { parent: user } })).serviceAccounts;
  } catch (x) {
    card.append(h("p", { class: "muted" }, x.code === "AccessDenied" ? "Only the root user manages service accounts." : `Service accounts cannot be listed: ${x.message}`));
    return card;
  }
  const body = h("tbody", {}, list.map((a) => h("tr", { "data-account": a.accessKey },
    h("td", { class: "name" }, a.accessKey, a.name ? h("div", { class: "muted" }, a.name) : null),
    h("td", {}, h("span", { class: `badge ${a.active ? "ok" : "warn"}` }, a.active ? "active" : "inactive")),
    h("td", { class: "hide-narrow" }, a.expires ? fmtDate(a.expires) : "never"),
    h("td", { class: "hide-narrow" }, a.hasPolicy ? "own policy (narrowed)" : "the user's"),
    h("td", {}, h("button", { type: "button", class: "danger", onclick: () => confirm(`Delete the service account ${a.accessKey}?`) && attempt(err, async () => {
      await api.admin(`service-accounts/${encodeURIComponent(a.accessKey)}`, { method: "DELETE" });
      toast(`Service account ${a.accessKey} deleted.`);
      await reload();
    }) }, "Delete")))));
  if (!list.length) body.append(empty(5, "No service accounts."));
  const label = h("input", { id: "sa-name", spellcheck: "false", autocomplete: "off", placeholder: "Name (optional)", "aria-label": "Service account name" });
  const expires = h("input", { id: "sa-expires", type: "datetime-local", "aria-label": "Expires (optional)" });
  const policy = policyEditor("sa-policy", " ");
  policy.placeholder = "No policy: the account can do what the user can.";
  const create = h("button", { type: "button", id: "sa-create", onclick: () => attempt(err, async () => {
    const doc = policy.value.trim() ? policy.documentText() : undefined;
    const when = expires.value ? new Date(expires.value).toISOString().replace(/\.\d+Z$/, "Z") : undefined;
    const a = await api.adminJson("service-accounts", { method: "POST", query: { parent: user, name: label.value.trim() || undefined, expires: when },
      body: doc, headers: { "Content-Type": "application/json" } });
    secretDialog(a.accessKey, a.secretKey);
    await reload();
  }) }, "Create service account");
  card.append(table("Service accounts", ["Access key", "State", h("span", { class: "hide-narrow" }, "Expires"), h("span", { class: "hide-narrow" }, "Permissions"), ""], body),
    h("details", {}, h("summary", {}, "New service account"),
      h("div", { class: "row" }, label, h("label", { for: "sa-expires", class: "inline" }, "Expires"), expires),
      h("p", { class: "muted" }, "Optional policy: the account may do only what both this policy and the user's own allow."), policy,
      h("div", { class: "row" }, create)));
  return card;
}

export async function groupsView() {
  const err = errorBox();
  const body = h("tbody");
  async function load() {
    const doc = await api.iam("ListGroups");
    const groups = members(doc, "Groups > member").map((g) => ({ name: text(g, "GroupName"), created: text(g, "CreateDate") }));
    body.replaceChildren(...groups.map((g) => h("tr", { "data-group": g.name },
      h("td", { class: "name" }, h("a", { href: groupHash(g.name) }, g.name)),
      h("td", { class: "hide-narrow" }, fmtDate(g.created)))));
    if (!groups.length) body.append(empty(2, "No groups yet."));
  }
  const create = oneField("new-group", "New group", "Create group", NAME, (name) => attempt(err, async () => {
    await api.iam("CreateGroup", { GroupName: name });
    toast(`Group ${name} created.`);
    location.hash = groupHash(name);
  }));
  setMain(h("h1", {}, "Groups"), tabs("groups"), err, create,
    h("div", { class: "card" }, table("Groups", ["Name", h("span", { class: "hide-narrow" }, "Created")], body)));
  await attempt(err, load);
}

export async function groupView(name) {
  const err = errorBox();
  const main = setMain(h("nav", { class: "crumbs", "aria-label": "Identity" }, h("a", { href: "#/groups" }, "Groups"), " / ", name),
    h("h1", { class: "name" }, name), tabs("groups"), err);
  let doc;
  try { doc = await api.iam("GetGroup", { GroupName: name }); } catch (x) { err.show(x); return; }
  const reload = () => groupView(name);
  const users = members(doc, "Users > member").map((u) => text(u, "UserName"));
  const allUsers = await api.iam("ListUsers").then((d) => members(d, "Users > member").map((u) => text(u, "UserName")), () => []);
  const allPolicies = await api.iam("ListPolicies").then((d) => members(d, "Policies > member").map((p) => text(p, "PolicyName")), () => []);
  const memberRows = h("tbody", {}, users.map((u) => h("tr", { "data-user": u },
    h("td", { class: "name" }, h("a", { href: userHash(u) }, u)),
    h("td", {}, h("button", { type: "button", class: "secondary", onclick: () => attempt(err, async () => {
      await api.iam("RemoveUserFromGroup", { UserName: u, GroupName: name });
      toast(`${u} removed.`);
      await reload();
    }) }, "Remove")))));
  if (!users.length) memberRows.append(empty(2, "No members."));
  const add = picker("add-member", "User", "Add member", allUsers.filter((u) => !users.includes(u)), (u) => attempt(err, async () => {
    await api.iam("AddUserToGroup", { UserName: u, GroupName: name });
    toast(`${u} added.`);
    await reload();
  }));
  const attDoc = await api.iam("ListAttachedGroupPolicies", { GroupName: name }).catch(() => null);
  const attachedNames = attDoc ? members(attDoc, "AttachedPolicies > member").map((p) => text(p, "PolicyName")) : [];
  const attached = h("tbody", {}, attachedNames.map((p) => h("tr", { "data-policy": p },
    h("td", { class: "name" }, h("a", { href: policyHash(p) }, p)),
    h("td", {}, h("button", { type: "button", class: "secondary", onclick: () => attempt(err, async () => {
      await api.iam("DetachGroupPolicy", { GroupName: name, PolicyArn: ARN_POLICY(p) });
      toast(`Policy ${p} detached.`);
      await reload();
    }) }, "Detach")))));
  if (!attachedNames.length) attached.append(empty(2, "No managed policies attached."));
  const attach = picker("attach-group-policy", "Policy", "Attach", allPolicies.filter((p) => !attachedNames.includes(p)), (p) => attempt(err, async () => {
    await api.iam("AttachGroupPolicy", { GroupName: name, PolicyArn: ARN_POLICY(p) });
    toast(`Policy ${p} attached.`);
    await reload();
  }));
  const remove = h("button", { type: "button", class: "danger", id: "delete-group", onclick: () => confirm(`Delete the group ${name}?`) && attempt(err, async () => {
    await api.iam("DeleteGroup", { GroupName: name });
    toast(`Group ${name} deleted.`);
    location.hash = "#/groups";
  }) }, "Delete group");
  main.append(
    h("h2", {}, "Members"), h("div", { class: "card" }, table("Members", ["User", ""], memberRows), add),
    h("h2", {}, "Managed policies"), h("div", { class: "card" }, table("Attached policies", ["Policy", ""], attached), attach),
    h("div", { class: "row" }, h("span", { class: "spacer" }), remove));
}

export async function policiesView() {
  const err = errorBox();
  const body = h("tbody");
  async function load() {
    const doc = await api.iam("ListPolicies");
    const ps = members(doc, "Policies > member").map((p) => ({ name: text(p, "PolicyName"), n: text(p, "AttachmentCount"), created: text(p, "CreateDate") }));
    body.replaceChildren(...ps.map((p) => h("tr", { "data-policy": p.name },
      h("td", { class: "name" }, h("a", { href: policyHash(p.name) }, p.name)),
      h("td", { class: "num" }, p.n), h("td", { class: "hide-narrow" }, fmtDate(p.created)))));
    if (!ps.length) body.append(empty(3, "No managed policies yet."));
  }
  const name = h("input", { id: "new-policy", required: true, pattern: "[\\w+=,.@\\-]{1,128}", spellcheck: "false", autocomplete: "off" });
  const doc = policyEditor("new-policy-doc");
  const form = h("form", { class: "card", "aria-label": "Create a policy" },
    h("label", { for: "new-policy" }, "New policy name"), name,
    h("label", { for: "new-policy-doc" }, "Document (IAM JSON)"), doc,
    h("div", { class: "row" }, h("button", { type: "submit", id: "create-policy" }, "Create policy")));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    attempt(err, async () => {
      const n = name.value.trim();
      await api.iam("CreatePolicy", { PolicyName: n, PolicyDocument: doc.documentText() });
      toast(`Policy ${n} created.`);
      location.hash = policyHash(n);
    });
  });
  setMain(h("h1", {}, "Policies"), tabs("policies"), err,
    h("div", { class: "card" }, table("Policies", ["Name", h("span", { class: "num" }, "Attached to"), h("span", { class: "hide-narrow" }, "Created")], body)),
    h("h2", {}, "Create a policy"), form);
  await attempt(err, load);
}

export async function policyView(name) {
  const err = errorBox();
  const main = setMain(h("nav", { class: "crumbs", "aria-label": "Identity" }, h("a", { href: "#/policies" }, "Policies"), " / ", name),
    h("h1", { class: "name" }, name), tabs("policies"), err);
  let p, v;
  try {
    [p, v] = await Promise.all([api.iam("GetPolicy", { PolicyArn: ARN_POLICY(name) }),
      api.iam("GetPolicyVersion", { PolicyArn: ARN_POLICY(name), VersionId: "v1" })]);
  } catch (x) { err.show(x); return; }
  const docText = decodeURIComponent(text(v, "PolicyVersion > Document"));
  const remove = h("button", { type: "button", class: "danger", id: "delete-policy", onclick: () => confirm(`Delete the policy ${name}?`) && attempt(err, async () => {
    await api.iam("DeletePolicy", { PolicyArn: ARN_POLICY(name) });
    toast(`Policy ${name} deleted.`);
    location.hash = "#/policies";
  }) }, "Delete policy");
  main.append(h("div", { class: "card" }, h("dl", { class: "kv" },
      h("dt", {}, "ARN"), h("dd", {}, text(p, "Policy > Arn")),
      h("dt", {}, "Attached to"), h("dd", {}, `${text(p, "Policy > AttachmentCount")} users and groups`),
      h("dt", {}, "Created"), h("dd", {}, fmtDate(text(p, "Policy > CreateDate"))))),
    h("h2", {}, "Document"), h("pre", { class: "card code", id: "policy-document" }, pretty(docText)),
    h("div", { class: "row" }, h("span", { class: "muted" }, "A policy is deleted once nothing has it attached."), h("span", { class: "spacer" }), remove));
}
