//! `quarry admin user|policy|group|svcacct`: identities of a running server, through its IAM
//! query API (`POST /`, signed for service `iam` with the root keys, as the aws cli sends it)
//! and, for what IAM has no call for (enabling/disabling users, service accounts), its admin API.
//!
//! ```text
//! quarry admin user add|list|info|disable|enable|remove ...
//! quarry admin policy create|list|info|attach|detach|remove ...
//! quarry admin group add|list|info|remove|add-member|remove-member ...
//! quarry admin svcacct add|list|info|remove ...
//! ```
//!
//! `--json` prints the answer as JSON: the admin API's JSON as it is; an IAM answer's result
//! element converted (elements to objects, `member` lists to arrays, text to strings).

use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use crate::admin::{encode, send, Connection, Signed};

const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user and an access key for it; prints the key and its secret (shown only here).
    Add(Named),
    /// List the users.
    List(Connection),
    /// A user: its keys, inline and attached policies, groups, service accounts.
    Info(Named),
    /// Refuse the user's keys, service accounts and sessions from the next request on.
    Disable(Named),
    /// Accept the user's keys again.
    Enable(Named),
    /// Delete a user with its access keys, service accounts, inline policies, attachments and
    /// group memberships.
    Remove(Named),
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Create a managed policy from a JSON document (FILE, or - for stdin).
    Create(PolicyCreate),
    /// List the managed policies.
    List(Connection),
    /// A managed policy and its document.
    Info(Named),
    /// Attach a managed policy to a user or a group.
    Attach(PolicyTarget),
    /// Detach a managed policy from a user or a group.
    Detach(PolicyTarget),
    /// Delete a managed policy (detach it first).
    Remove(Named),
}

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Create a group, with MEMBERS (users) when given.
    Add(Members),
    /// List the groups.
    List(Connection),
    /// A group: its members and policies.
    Info(Named),
    /// Delete a group (it must have no members and no policies).
    Remove(Named),
    /// Add users to a group.
    AddMember(Members),
    /// Remove users from a group.
    RemoveMember(Members),
}

#[derive(Debug, Subcommand)]
pub enum SvcacctCommand {
    /// Create a service account of PARENT (a user): keys that act as the user, narrowed by
    /// --policy when given, until --expires when given. Prints the keys (the secret only here).
    Add(SvcacctAdd),
    /// List the service accounts (of PARENT when given).
    List(SvcacctList),
    /// A service account and its policy.
    Info(SvcacctKey),
    /// Delete a service account.
    Remove(SvcacctKey),
}

#[derive(Debug, Args)]
pub struct Named {
    #[command(flatten)]
    pub conn: Connection,
    #[arg(value_name = "NAME")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct PolicyCreate {
    #[command(flatten)]
    pub conn: Connection,
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The policy document (IAM JSON); - reads stdin.
    #[arg(value_name = "FILE")]
    pub file: String,
}

#[derive(Debug, Args)]
pub struct PolicyTarget {
    #[command(flatten)]
    pub conn: Connection,
    /// The managed policy's name.
    #[arg(value_name = "NAME")]
    pub name: String,
    #[arg(
        long,
        value_name = "USER",
        conflicts_with = "group",
        required_unless_present = "group"
    )]
    pub user: Option<String>,
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
}

#[derive(Debug, Args)]
pub struct Members {
    #[command(flatten)]
    pub conn: Connection,
    #[arg(value_name = "GROUP")]
    pub group: String,
    #[arg(value_name = "USERS")]
    pub users: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SvcacctAdd {
    #[command(flatten)]
    pub conn: Connection,
    /// The user the account acts as.
    #[arg(value_name = "PARENT")]
    pub parent: String,
    /// A name to recognise it by.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A policy (IAM JSON file, - for stdin) that narrows the parent's permissions.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<String>,
    /// When its keys stop working (RFC 3339, e.g. 2030-01-31T12:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub expires: Option<String>,
}

#[derive(Debug, Args)]
pub struct SvcacctList {
    #[command(flatten)]
    pub conn: Connection,
    #[arg(value_name = "PARENT")]
    pub parent: Option<String>,
}

#[derive(Debug, Args)]
pub struct SvcacctKey {
    #[command(flatten)]
    pub conn: Connection,
    #[arg(value_name = "ACCESS_KEY")]
    pub key: String,
}

/// One IAM query call; returns its `<ActionResult>` as JSON (`{}` for results without one).
async fn iam(conn: &Connection, action: &str, params: &[(&str, &str)]) -> anyhow::Result<Value> {
    let mut form = vec![format!("Action={action}"), "Version=2010-05-08".to_owned()];
    form.extend(
        params
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v))),
    );
    let body = form.join("&");
    let xml = send(
        conn,
        "POST",
        "/",
        &[],
        Signed {
            service: "iam",
            body: body.as_bytes(),
            content_type: Some("application/x-www-form-urlencoded; charset=utf-8"),
        },
        TIMEOUT,
    )
    .await
    .with_context(|| action.to_owned())?;
    let doc =
        xml_to_json(&xml).with_context(|| format!("{action}: the answer is not IAM XML: {xml}"))?;
    Ok(doc
        .get(format!("{action}Response"))
        .and_then(|r| r.get(format!("{action}Result")))
        .cloned()
        .unwrap_or_else(|| json!({})))
}

/// A call to the admin API; returns its JSON.
async fn admin(
    conn: &Connection,
    method: &str,
    call: &str,
    query: &[(&str, &str)],
    body: &[u8],
) -> anyhow::Result<Value> {
    let path = format!("{}{call}", quarry_s3::admin::V1);
    let text = send(conn, method, &path, query, Signed::s3(body), TIMEOUT).await?;
    serde_json::from_str(&text).with_context(|| format!("the answer is not JSON: {text}"))
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#xD;", "\r")
        .replace("&#xA;", "\n")
        .replace("&amp;", "&")
}

/// The XML the IAM API answers, as JSON: an element with children is an object (a `member`
/// child makes it an array of them), one with only text a string. Attributes are dropped.
pub fn xml_to_json(xml: &str) -> anyhow::Result<Value> {
    let mut rest = xml.trim();
    if let Some(r) = rest.strip_prefix("<?") {
        rest = r
            .split_once("?>")
            .context("an unclosed declaration")?
            .1
            .trim();
    }
    let (name, value, tail) = element(rest)?;
    if !tail.trim().is_empty() {
        bail!("text after the document");
    }
    let mut doc = Map::new();
    doc.insert(name, value);
    Ok(Value::Object(doc))
}

/// Parses one element at the start of `s`: its name, value and what follows it.
fn element(s: &str) -> anyhow::Result<(String, Value, &str)> {
    let s = s.trim_start();
    let inner = s.strip_prefix('<').context("an element was expected")?;
    let (tag, mut rest) = inner.split_once('>').context("an unclosed tag")?;
    let empty = tag.ends_with('/');
    let name = tag
        .trim_end_matches('/')
        .split_whitespace()
        .next()
        .context("a tag without a name")?
        .to_owned();
    if empty {
        return Ok((name, Value::String(String::new()), rest));
    }
    let close = format!("</{name}>");
    if !rest.trim_start().starts_with('<') || rest.trim_start().starts_with("</") {
        let (text, tail) = rest.split_once(&close).context("an unclosed element")?;
        return Ok((name, Value::String(unescape(text)), tail));
    }
    let mut fields = Map::new();
    let mut members = Vec::new();
    loop {
        let t = rest.trim_start();
        if let Some(tail) = t.strip_prefix(&close) {
            let value = if members.is_empty() {
                Value::Object(fields)
            } else {
                Value::Array(members)
            };
            return Ok((name, value, tail));
        }
        let (child, value, tail) = element(t)?;
        if child == "member" {
            members.push(value);
        } else {
            fields.insert(child, value);
        }
        rest = tail;
    }
}

fn read_document(file: &str) -> anyhow::Result<String> {
    if file == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).context("reading stdin")?;
        Ok(s)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {file}"))
    }
}

fn policy_arn(name: &str) -> String {
    if name.starts_with("arn:") {
        name.to_owned()
    } else {
        format!("arn:aws:iam::000000000000:policy/{name}")
    }
}

fn s<'v>(v: &'v Value, path: &[&str]) -> &'v str {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_str().unwrap_or("")
}

fn list<'v>(v: &'v Value, key: &str) -> Vec<&'v Value> {
    match &v[key] {
        Value::Array(a) => a.iter().collect(),
        _ => Vec::new(),
    }
}

fn print(conn: &Connection, value: &Value, human: impl FnOnce(&Value) -> String) {
    if conn.json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        );
    } else {
        let text = human(value);
        if !text.is_empty() {
            println!("{}", text.trim_end());
        }
    }
}

fn names(v: &Value, key: &str, field: &str) -> Vec<String> {
    list(v, key)
        .iter()
        .map(|m| m.as_str().unwrap_or(s(m, &[field])).to_owned())
        .collect()
}

pub async fn user(cmd: UserCommand) -> anyhow::Result<()> {
    match cmd {
        UserCommand::Add(a) => {
            let u = iam(&a.conn, "CreateUser", &[("UserName", a.name.as_str())]).await?;
            let k = iam(&a.conn, "CreateAccessKey", &[("UserName", a.name.as_str())]).await?;
            let out = json!({"user": u["User"], "accessKey": k["AccessKey"]});
            print(&a.conn, &out, |v| {
                format!(
                    "User {} created.\nAccess key: {}\nSecret key: {}\n(the secret is shown only now)",
                    s(v, &["user", "UserName"]),
                    s(v, &["accessKey", "AccessKeyId"]),
                    s(v, &["accessKey", "SecretAccessKey"])
                )
            });
        }
        UserCommand::List(conn) => {
            let r = iam(&conn, "ListUsers", &[]).await?;
            let users = Value::Array(list(&r, "Users").into_iter().cloned().collect());
            let out = json!({ "users": users });
            print(&conn, &out, |v| {
                list(v, "users")
                    .iter()
                    .map(|u| {
                        format!(
                            "{}\t{}\t{}\n",
                            s(u, &["UserName"]),
                            s(u, &["UserId"]),
                            s(u, &["CreateDate"])
                        )
                    })
                    .collect()
            });
        }
        UserCommand::Info(a) => {
            let out = user_info(&a.conn, &a.name).await?;
            print(&a.conn, &out, |v| {
                let mut t = format!(
                    "User:       {}\nId:         {}\nCreated:    {}\n",
                    s(v, &["user", "UserName"]),
                    s(v, &["user", "UserId"]),
                    s(v, &["user", "CreateDate"])
                );
                for k in list(v, "accessKeys") {
                    t += &format!(
                        "Access key: {} ({})\n",
                        s(k, &["AccessKeyId"]),
                        s(k, &["Status"])
                    );
                }
                for p in list(v, "inlinePolicies") {
                    t += &format!("Inline:     {}\n", p.as_str().unwrap_or(""));
                }
                for p in list(v, "attachedPolicies") {
                    t += &format!("Attached:   {}\n", s(p, &["PolicyName"]));
                }
                for g in list(v, "groups") {
                    t += &format!("Group:      {}\n", s(g, &["GroupName"]));
                }
                for sa in list(v, "serviceAccounts") {
                    t += &format!(
                        "Service account: {}{}\n",
                        s(sa, &["accessKey"]),
                        if sa["active"] == json!(true) {
                            ""
                        } else {
                            " (inactive)"
                        }
                    );
                }
                t
            });
        }
        UserCommand::Disable(a) => set_enabled(&a, false).await?,
        UserCommand::Enable(a) => set_enabled(&a, true).await?,
        UserCommand::Remove(a) => {
            let info = user_info(&a.conn, &a.name).await?;
            let user = a.name.as_str();
            for k in list(&info, "accessKeys") {
                iam(
                    &a.conn,
                    "DeleteAccessKey",
                    &[("UserName", user), ("AccessKeyId", s(k, &["AccessKeyId"]))],
                )
                .await?;
            }
            for sa in list(&info, "serviceAccounts") {
                admin(
                    &a.conn,
                    "DELETE",
                    &format!("service-accounts/{}", s(sa, &["accessKey"])),
                    &[],
                    b"",
                )
                .await?;
            }
            for p in list(&info, "inlinePolicies") {
                iam(
                    &a.conn,
                    "DeleteUserPolicy",
                    &[("UserName", user), ("PolicyName", p.as_str().unwrap_or(""))],
                )
                .await?;
            }
            for p in list(&info, "attachedPolicies") {
                iam(
                    &a.conn,
                    "DetachUserPolicy",
                    &[("UserName", user), ("PolicyArn", s(p, &["PolicyArn"]))],
                )
                .await?;
            }
            for g in list(&info, "groups") {
                iam(
                    &a.conn,
                    "RemoveUserFromGroup",
                    &[("UserName", user), ("GroupName", s(g, &["GroupName"]))],
                )
                .await?;
            }
            iam(&a.conn, "DeleteUser", &[("UserName", user)]).await?;
            print(&a.conn, &json!({ "removed": user }), |_| {
                format!("User {user} removed.")
            });
        }
    }
    Ok(())
}

async fn set_enabled(a: &Named, enabled: bool) -> anyhow::Result<()> {
    let call = if enabled {
        "users/enable"
    } else {
        "users/disable"
    };
    let out = admin(&a.conn, "POST", call, &[("user", a.name.as_str())], b"").await?;
    print(&a.conn, &out, |_| {
        format!(
            "User {} {}.",
            a.name,
            if enabled { "enabled" } else { "disabled" }
        )
    });
    Ok(())
}

async fn user_info(conn: &Connection, name: &str) -> anyhow::Result<Value> {
    let u = iam(conn, "GetUser", &[("UserName", name)]).await?;
    let keys = iam(conn, "ListAccessKeys", &[("UserName", name)]).await?;
    let inline = iam(conn, "ListUserPolicies", &[("UserName", name)]).await?;
    let attached = iam(conn, "ListAttachedUserPolicies", &[("UserName", name)]).await?;
    let groups = iam(conn, "ListGroupsForUser", &[("UserName", name)]).await?;
    let accounts = admin(conn, "GET", "service-accounts", &[("parent", name)], b"").await?;
    let arr = |v: &Value, k: &str| Value::Array(list(v, k).into_iter().cloned().collect());
    Ok(json!({
        "user": u["User"],
        "accessKeys": arr(&keys, "AccessKeyMetadata"),
        "inlinePolicies": arr(&inline, "PolicyNames"),
        "attachedPolicies": arr(&attached, "AttachedPolicies"),
        "groups": arr(&groups, "Groups"),
        "serviceAccounts": accounts["serviceAccounts"],
    }))
}

pub async fn policy(cmd: PolicyCommand) -> anyhow::Result<()> {
    match cmd {
        PolicyCommand::Create(a) => {
            let doc = read_document(&a.file)?;
            let r = iam(
                &a.conn,
                "CreatePolicy",
                &[
                    ("PolicyName", a.name.as_str()),
                    ("PolicyDocument", doc.as_str()),
                ],
            )
            .await?;
            print(&a.conn, &r, |v| {
                format!("Policy {} created: {}", a.name, s(v, &["Policy", "Arn"]))
            });
        }
        PolicyCommand::List(conn) => {
            let r = iam(&conn, "ListPolicies", &[]).await?;
            let out = json!({ "policies": Value::Array(list(&r, "Policies").into_iter().cloned().collect()) });
            print(&conn, &out, |v| {
                list(v, "policies")
                    .iter()
                    .map(|p| {
                        format!(
                            "{}\t{} attachment(s)\n",
                            s(p, &["PolicyName"]),
                            s(p, &["AttachmentCount"])
                        )
                    })
                    .collect()
            });
        }
        PolicyCommand::Info(a) => {
            let arn = policy_arn(&a.name);
            let p = iam(&a.conn, "GetPolicy", &[("PolicyArn", arn.as_str())]).await?;
            let v = iam(
                &a.conn,
                "GetPolicyVersion",
                &[("PolicyArn", arn.as_str()), ("VersionId", "v1")],
            )
            .await?;
            let doc = s(&v, &["PolicyVersion", "Document"]);
            let decoded = percent_decode(doc);
            let document: Value = serde_json::from_str(&decoded).unwrap_or(Value::String(decoded));
            let out = json!({ "policy": p["Policy"], "document": document });
            print(&a.conn, &out, |v| {
                format!(
                    "Policy:      {}\nArn:         {}\nAttachments: {}\n{}",
                    s(v, &["policy", "PolicyName"]),
                    s(v, &["policy", "Arn"]),
                    s(v, &["policy", "AttachmentCount"]),
                    serde_json::to_string_pretty(&v["document"]).unwrap_or_default()
                )
            });
        }
        PolicyCommand::Attach(a) => attach(&a, true).await?,
        PolicyCommand::Detach(a) => attach(&a, false).await?,
        PolicyCommand::Remove(a) => {
            iam(
                &a.conn,
                "DeletePolicy",
                &[("PolicyArn", policy_arn(&a.name).as_str())],
            )
            .await?;
            print(&a.conn, &json!({ "removed": a.name }), |_| {
                format!("Policy {} removed.", a.name)
            });
        }
    }
    Ok(())
}

async fn attach(a: &PolicyTarget, attach: bool) -> anyhow::Result<()> {
    let verb = if attach { "Attach" } else { "Detach" };
    let arn = policy_arn(&a.name);
    let (action, key, target) = match (&a.user, &a.group) {
        (Some(u), _) => (format!("{verb}UserPolicy"), "UserName", u),
        (None, Some(g)) => (format!("{verb}GroupPolicy"), "GroupName", g),
        (None, None) => bail!("give --user USER or --group GROUP"),
    };
    iam(
        &a.conn,
        &action,
        &[(key, target.as_str()), ("PolicyArn", arn.as_str())],
    )
    .await?;
    let mut out = json!({ "policy": a.name, "attached": attach });
    out[key] = json!(target);
    print(&a.conn, &out, |_| {
        format!(
            "Policy {} {} {target}.",
            a.name,
            if attach {
                "attached to"
            } else {
                "detached from"
            }
        )
    });
    Ok(())
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(x) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub async fn group(cmd: GroupCommand) -> anyhow::Result<()> {
    match cmd {
        GroupCommand::Add(a) => {
            iam(&a.conn, "CreateGroup", &[("GroupName", a.group.as_str())]).await?;
            members(&a, true).await?;
            let out = group_info(&a.conn, &a.group).await?;
            print(&a.conn, &out, |_| format!("Group {} created.", a.group));
        }
        GroupCommand::List(conn) => {
            let r = iam(&conn, "ListGroups", &[]).await?;
            let out = json!({ "groups": Value::Array(list(&r, "Groups").into_iter().cloned().collect()) });
            print(&conn, &out, |v| {
                list(v, "groups")
                    .iter()
                    .map(|g| format!("{}\t{}\n", s(g, &["GroupName"]), s(g, &["CreateDate"])))
                    .collect()
            });
        }
        GroupCommand::Info(a) => {
            let out = group_info(&a.conn, &a.name).await?;
            print(&a.conn, &out, |v| {
                let mut t = format!("Group:    {}\n", s(v, &["group", "GroupName"]));
                t += &format!("Members:  {}\n", names(v, "members", "UserName").join(", "));
                t += &format!("Inline:   {}\n", names(v, "inlinePolicies", "").join(", "));
                t += &format!(
                    "Attached: {}\n",
                    names(v, "attachedPolicies", "PolicyName").join(", ")
                );
                t
            });
        }
        GroupCommand::Remove(a) => {
            iam(&a.conn, "DeleteGroup", &[("GroupName", a.name.as_str())]).await?;
            print(&a.conn, &json!({ "removed": a.name }), |_| {
                format!("Group {} removed.", a.name)
            });
        }
        GroupCommand::AddMember(a) => {
            members(&a, true).await?;
            let out = group_info(&a.conn, &a.group).await?;
            print(&a.conn, &out, |v| {
                format!(
                    "Members of {}: {}",
                    a.group,
                    names(v, "members", "UserName").join(", ")
                )
            });
        }
        GroupCommand::RemoveMember(a) => {
            members(&a, false).await?;
            let out = group_info(&a.conn, &a.group).await?;
            print(&a.conn, &out, |v| {
                format!(
                    "Members of {}: {}",
                    a.group,
                    names(v, "members", "UserName").join(", ")
                )
            });
        }
    }
    Ok(())
}

async fn members(a: &Members, add: bool) -> anyhow::Result<()> {
    let action = if add {
        "AddUserToGroup"
    } else {
        "RemoveUserFromGroup"
    };
    for u in &a.users {
        iam(
            &a.conn,
            action,
            &[("GroupName", a.group.as_str()), ("UserName", u.as_str())],
        )
        .await?;
    }
    Ok(())
}

async fn group_info(conn: &Connection, name: &str) -> anyhow::Result<Value> {
    let g = iam(conn, "GetGroup", &[("GroupName", name)]).await?;
    let inline = iam(conn, "ListGroupPolicies", &[("GroupName", name)]).await?;
    let attached = iam(conn, "ListAttachedGroupPolicies", &[("GroupName", name)]).await?;
    let arr = |v: &Value, k: &str| Value::Array(list(v, k).into_iter().cloned().collect());
    Ok(json!({
        "group": g["Group"],
        "members": arr(&g, "Users"),
        "inlinePolicies": arr(&inline, "PolicyNames"),
        "attachedPolicies": arr(&attached, "AttachedPolicies"),
    }))
}

pub async fn svcacct(cmd: SvcacctCommand) -> anyhow::Result<()> {
    match cmd {
        SvcacctCommand::Add(a) => {
            let policy = a.policy.as_deref().map(read_document).transpose()?;
            let mut query = vec![("parent", a.parent.as_str())];
            if let Some(n) = &a.name {
                query.push(("name", n.as_str()));
            }
            if let Some(e) = &a.expires {
                query.push(("expires", e.as_str()));
            }
            let out = admin(
                &a.conn,
                "POST",
                "service-accounts",
                &query,
                policy.unwrap_or_default().as_bytes(),
            )
            .await?;
            print(&a.conn, &out, |v| {
                format!(
                    "Service account of {} created.\nAccess key: {}\nSecret key: {}\n(the secret is shown only now)",
                    s(v, &["parent"]),
                    s(v, &["accessKey"]),
                    s(v, &["secretKey"])
                )
            });
        }
        SvcacctCommand::List(a) => {
            let query: Vec<(&str, &str)> =
                a.parent.iter().map(|p| ("parent", p.as_str())).collect();
            let out = admin(&a.conn, "GET", "service-accounts", &query, b"").await?;
            print(&a.conn, &out, |v| {
                list(v, "serviceAccounts")
                    .iter()
                    .map(|sa| {
                        format!(
                            "{}\t{}\t{}\t{}\n",
                            s(sa, &["accessKey"]),
                            s(sa, &["parent"]),
                            sa["name"].as_str().unwrap_or("-"),
                            sa["expires"].as_str().unwrap_or("no expiry")
                        )
                    })
                    .collect()
            });
        }
        SvcacctCommand::Info(a) => {
            let out = admin(
                &a.conn,
                "GET",
                &format!("service-accounts/{}", a.key),
                &[],
                b"",
            )
            .await?;
            print(&a.conn, &out, |v| {
                format!(
                    "Access key: {}\nParent:     {}\nName:       {}\nExpires:    {}\nPolicy:     {}",
                    s(v, &["accessKey"]),
                    s(v, &["parent"]),
                    v["name"].as_str().unwrap_or("-"),
                    v["expires"].as_str().unwrap_or("never"),
                    v["policy"].as_str().unwrap_or("(the parent's permissions)")
                )
            });
        }
        SvcacctCommand::Remove(a) => {
            let out = admin(
                &a.conn,
                "DELETE",
                &format!("service-accounts/{}", a.key),
                &[],
                b"",
            )
            .await?;
            print(&a.conn, &out, |_| {
                format!("Service account {} removed.", a.key)
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iam_answers_read_as_json() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListUsersResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ListUsersResult><Users><member><UserName>a&amp;b</UserName><UserId>AIDA1</UserId></member><member><UserName>c</UserName><UserId>AIDA2</UserId></member></Users><IsTruncated>false</IsTruncated></ListUsersResult><ResponseMetadata><RequestId>x</RequestId></ResponseMetadata></ListUsersResponse>"#;
        let v = xml_to_json(xml).unwrap();
        let r = &v["ListUsersResponse"]["ListUsersResult"];
        assert_eq!(r["Users"][0]["UserName"], "a&b");
        assert_eq!(r["Users"][1]["UserId"], "AIDA2");
        assert_eq!(r["IsTruncated"], "false");
        let empty = xml_to_json("<A><B></B><C/></A>").unwrap();
        assert_eq!(empty, json!({"A": {"B": "", "C": ""}}));
        assert!(xml_to_json("<A><B></A>").is_err());
        assert_eq!(percent_decode("%7B%22a%22%3A1%7D"), "{\"a\":1}");
    }
}
