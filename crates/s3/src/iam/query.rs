//! The AWS IAM and STS query APIs at the S3 endpoint: `POST /` with a form body
//! (`Action=CreateUser&UserName=...&Version=2010-05-08`), signed with SigV4 for service `iam` or
//! `sts`. Answers and errors are the IAM/STS XML documents the AWS SDKs and CLI parse.
//!
//! Authorization: the root user may call everything; a user needs `iam:<Action>` on the entity
//! the call names (`arn:aws:iam::000000000000:user/<name>`, `...:group/<name>`,
//! `...:policy/<name>`, else `*`) from its identity policies. `sts:GetCallerIdentity` and
//! `sts:GetSessionToken` need nothing, as in AWS; nor does `sts:AssumeRole` (MinIO's model).

use std::collections::BTreeMap;

use axum::body::Body;
use axum::response::Response;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::StatusCode;
use quarry_policy::Policy;

use super::state::{
    group_arn, policy_arn, user_arn, AccessKey, Group, IamState, Identity, KeyOwner, ManagedPolicy,
    User, ACCOUNT_ID,
};
use super::sts::{
    check_session_policy, Session, DEFAULT_DURATION, DEFAULT_TOKEN_DURATION, MAX_DURATION,
    MAX_TOKEN_DURATION, MIN_DURATION, SESSION_KEY_PREFIX,
};
use super::{Iam, IamError};
use crate::authz::{self, Caller};
use crate::error::{S3Error, S3ErrorCode};
use crate::router::Query;
use crate::xml::XmlWriter;

const IAM_XMLNS: &str = "https://iam.amazonaws.com/doc/2010-05-08/";
const STS_XMLNS: &str = "https://sts.amazonaws.com/doc/2011-06-15/";

/// The largest form body accepted (policy documents travel in it).
pub const MAX_FORM: usize = 64 * 1024;
/// The largest policy document (AWS's limit for managed policies is 6,144 characters; inline
/// ones share 2,048 per user: Quarry allows the larger for both).
const MAX_POLICY: usize = 10 * 1024;
/// Access keys per user, as in AWS.
const MAX_KEYS_PER_USER: usize = 2;

/// One parsed query call.
#[derive(Debug, Clone)]
pub struct QueryCall {
    /// `iam` or `sts`: the service the request was signed for.
    pub service: &'static str,
    pub action: String,
    params: Query,
}

impl QueryCall {
    pub fn parse(service: &'static str, body: &[u8]) -> Result<QueryCall, S3Error> {
        let text = std::str::from_utf8(body).map_err(|_| {
            S3Error::new(S3ErrorCode::InvalidRequest, "The form body is not UTF-8.")
        })?;
        let params = Query::parse(Some(text))?;
        let action = params
            .get("Action")
            .filter(|a| !a.is_empty())
            .ok_or_else(|| S3Error::new(S3ErrorCode::InvalidRequest, "The form has no Action."))?
            .to_owned();
        Ok(QueryCall {
            service,
            action,
            params,
        })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.params.get(name)
    }

    fn required(&self, name: &str) -> Result<&str, IamError> {
        self.get(name).filter(|v| !v.is_empty()).ok_or_else(|| {
            IamError::InvalidInput(format!("{name} is required for {}.", self.action))
        })
    }

    /// What the call needs: `iam:<Action>` (or `sts:<Action>`) on the entity it names.
    pub fn need(&self) -> (String, String) {
        let resource = if let Some(u) = self.get("UserName") {
            user_arn(u)
        } else if let Some(g) = self.get("GroupName") {
            group_arn(g)
        } else if let Some(p) = self.get("PolicyArn") {
            p.to_owned()
        } else if let Some(p) = self.get("PolicyName") {
            policy_arn(p)
        } else {
            "*".to_owned()
        };
        (format!("{}:{}", self.service, self.action), resource)
    }
}

/// Authorizes and runs a call; every answer, refusals included, is an IAM/STS document.
pub async fn serve(
    iam: &Iam,
    caller: &Caller,
    ctx: &quarry_policy::Context,
    call: QueryCall,
) -> Response {
    let ns = if call.service == "sts" {
        STS_XMLNS
    } else {
        IAM_XMLNS
    };
    // What a session may do is a part of what its caller may do: asking for one needs no
    // permission of its own (MinIO's model), nor does asking who one is (as in AWS).
    let free = call.service == "sts"
        && matches!(
            call.action.as_str(),
            "GetCallerIdentity" | "AssumeRole" | "GetSessionToken"
        );
    if matches!(caller, Caller::Anonymous) {
        return error(ns, "AccessDenied", 403, "Access Denied.");
    }
    if let Caller::User(id) = caller {
        let (action, resource) = call.need();
        let principal = quarry_policy::Principal {
            anonymous: false,
            ids: vec![id.arn.clone()],
        };
        if !free && !authz::allowed(id, &principal, &action, &resource, ctx) {
            let e = authz::denied_for(caller, &action, &resource);
            return error(ns, "AccessDenied", 403, &e.message);
        }
    }
    let result = if call.service == "sts" {
        sts(iam, caller, &call)
    } else {
        run(iam, caller, &call).await
    };
    match result {
        Ok(body) => {
            let mut w = XmlWriter::with_namespace(&format!("{}Response", call.action), ns);
            w.open(&format!("{}Result", call.action));
            body.write(&mut w);
            w.close(&format!("{}Result", call.action));
            w.open("ResponseMetadata")
                .elem("RequestId", &uuid::Uuid::new_v4().to_string())
                .close("ResponseMetadata");
            let mut r = Response::new(Body::from(w.finish(&format!("{}Response", call.action))));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/xml"));
            r
        }
        Err(e) => {
            if matches!(e, IamError::Storage(_) | IamError::Corrupt(_)) {
                tracing::warn!(action = %call.action, error = %e, "IAM call failed");
            }
            let (code, status) = e.code();
            error(ns, code, status, &e.to_string())
        }
    }
}

/// An IAM/STS error document.
pub fn error(ns: &str, code: &str, status: u16, message: &str) -> Response {
    let mut w = XmlWriter::with_namespace("ErrorResponse", ns);
    w.open("Error")
        .elem("Type", if status >= 500 { "Receiver" } else { "Sender" })
        .elem("Code", code)
        .elem("Message", message)
        .close("Error")
        .elem("RequestId", &uuid::Uuid::new_v4().to_string());
    let mut r = Response::new(Body::from(w.finish("ErrorResponse")));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/xml"));
    r
}

/// The content of a `<XResult>` element.
enum Answer {
    Empty,
    User(String, User),
    Users(Vec<(String, User)>),
    AccessKey(String, String, String, AccessKey),
    AccessKeys(String, Vec<(String, AccessKey)>),
    /// `UserName` or `GroupName`, the owner, the policy name, the document.
    InlinePolicy(&'static str, String, String, String),
    Names(&'static str, Vec<String>),
    Policy(String, ManagedPolicy, usize),
    Policies(Vec<(String, ManagedPolicy, usize)>),
    /// A managed policy's one version: its document and creation time.
    PolicyVersion(String, String),
    Attached(Vec<String>),
    Group(String, Group, Vec<(String, User)>),
    Groups(&'static str, Vec<(String, Group)>),
    CallerIdentity(String, String),
    /// Temporary credentials, the caller's ARN and user id, the session name.
    AssumeRole(Session, String, String, String),
    /// Temporary credentials of the caller.
    SessionToken(Session),
}

fn write_credentials(w: &mut XmlWriter, session: &Session) {
    let expiration = time::OffsetDateTime::from_unix_timestamp(session.expires)
        .map(rfc3339)
        .unwrap_or_default();
    w.open("Credentials")
        .elem("AccessKeyId", &session.access_key)
        .elem("SecretAccessKey", &session.secret_key)
        .elem("SessionToken", &session.token)
        .elem("Expiration", &expiration)
        .close("Credentials");
}

fn iso(t: &str) -> &str {
    t
}

fn write_user(w: &mut XmlWriter, name: &str, u: &User) {
    w.elem("Path", "/")
        .elem("UserName", name)
        .elem("UserId", &u.id)
        .elem("Arn", &user_arn(name))
        .elem("CreateDate", iso(&u.created));
}

fn write_group(w: &mut XmlWriter, name: &str, g: &Group) {
    w.elem("Path", "/")
        .elem("GroupName", name)
        .elem("GroupId", &g.id)
        .elem("Arn", &group_arn(name))
        .elem("CreateDate", iso(&g.created));
}

fn write_policy(w: &mut XmlWriter, name: &str, p: &ManagedPolicy, attachments: usize) {
    w.elem("PolicyName", name)
        .elem("PolicyId", &p.id)
        .elem("Arn", &policy_arn(name))
        .elem("Path", "/")
        .elem("DefaultVersionId", "v1")
        .elem_display("AttachmentCount", attachments)
        .elem_display("IsAttachable", true)
        .elem("CreateDate", iso(&p.created))
        .elem("UpdateDate", iso(&p.created));
}

impl Answer {
    fn write(&self, w: &mut XmlWriter) {
        match self {
            Answer::Empty => {}
            Answer::User(name, u) => {
                w.open("User");
                write_user(w, name, u);
                w.close("User");
            }
            Answer::Users(users) => {
                w.open("Users");
                for (name, u) in users {
                    w.open("member");
                    write_user(w, name, u);
                    w.close("member");
                }
                w.close("Users").elem_display("IsTruncated", false);
            }
            Answer::AccessKey(user, ak, secret, key) => {
                w.open("AccessKey")
                    .elem("UserName", user)
                    .elem("AccessKeyId", ak)
                    .elem("Status", status(key.active))
                    .elem("SecretAccessKey", secret)
                    .elem("CreateDate", iso(&key.created))
                    .close("AccessKey");
            }
            Answer::AccessKeys(user, keys) => {
                w.elem("UserName", user).open("AccessKeyMetadata");
                for (ak, key) in keys {
                    w.open("member")
                        .elem("UserName", user)
                        .elem("AccessKeyId", ak)
                        .elem("Status", status(key.active))
                        .elem("CreateDate", iso(&key.created))
                        .close("member");
                }
                w.close("AccessKeyMetadata")
                    .elem_display("IsTruncated", false);
            }
            Answer::InlinePolicy(tag, owner, name, doc) => {
                w.elem(tag, owner)
                    .elem("PolicyName", name)
                    .elem("PolicyDocument", &crate::xml::url_encode(doc));
            }
            Answer::Names(element, names) => {
                w.open(element);
                for n in names {
                    w.elem("member", n);
                }
                w.close(element).elem_display("IsTruncated", false);
            }
            Answer::Policy(name, p, n) => {
                w.open("Policy");
                write_policy(w, name, p, *n);
                w.close("Policy");
            }
            Answer::PolicyVersion(doc, created) => {
                w.open("PolicyVersion")
                    .elem("Document", &crate::xml::url_encode(doc))
                    .elem("VersionId", "v1")
                    .elem_display("IsDefaultVersion", true)
                    .elem("CreateDate", iso(created))
                    .close("PolicyVersion");
            }
            Answer::Policies(ps) => {
                w.open("Policies");
                for (name, p, n) in ps {
                    w.open("member");
                    write_policy(w, name, p, *n);
                    w.close("member");
                }
                w.close("Policies").elem_display("IsTruncated", false);
            }
            Answer::Attached(names) => {
                w.open("AttachedPolicies");
                for n in names {
                    w.open("member")
                        .elem("PolicyName", n)
                        .elem("PolicyArn", &policy_arn(n))
                        .close("member");
                }
                w.close("AttachedPolicies")
                    .elem_display("IsTruncated", false);
            }
            Answer::Group(name, g, users) => {
                w.open("Group");
                write_group(w, name, g);
                w.close("Group").open("Users");
                for (un, u) in users {
                    w.open("member");
                    write_user(w, un, u);
                    w.close("member");
                }
                w.close("Users").elem_display("IsTruncated", false);
            }
            Answer::Groups(element, groups) => {
                w.open(element);
                for (name, g) in groups {
                    w.open("member");
                    write_group(w, name, g);
                    w.close("member");
                }
                w.close(element).elem_display("IsTruncated", false);
            }
            Answer::SessionToken(session) => write_credentials(w, session),
            Answer::AssumeRole(session, arn, user_id, name) => {
                write_credentials(w, session);
                w.open("AssumedRoleUser")
                    .elem("Arn", arn)
                    .elem("AssumedRoleId", &format!("{user_id}:{name}"))
                    .close("AssumedRoleUser");
            }
            Answer::CallerIdentity(arn, user_id) => {
                w.elem("Arn", arn)
                    .elem("UserId", user_id)
                    .elem("Account", ACCOUNT_ID);
            }
        }
    }
}

fn status(active: bool) -> &'static str {
    if active {
        "Active"
    } else {
        "Inactive"
    }
}

fn sts(iam: &Iam, caller: &Caller, call: &QueryCall) -> Result<Answer, IamError> {
    match call.action.as_str() {
        "AssumeRole" => assume_role(iam, caller, call),
        "GetSessionToken" => get_session_token(iam, caller, call),
        "GetCallerIdentity" => Ok(match caller {
            Caller::Root => Answer::CallerIdentity(
                format!("arn:aws:iam::{ACCOUNT_ID}:root"),
                ACCOUNT_ID.to_owned(),
            ),
            Caller::User(id) => Answer::CallerIdentity(id.arn.clone(), id.user_id.clone()),
            // Never reaches the query API (anonymous requests are only bucket requests).
            Caller::Anonymous => {
                return Err(IamError::InvalidInput("The request is not signed.".into()))
            }
        }),
        other => Err(IamError::InvalidAction(format!(
            "Could not find operation {other} for version 2011-06-15 (STS here answers AssumeRole, GetSessionToken and GetCallerIdentity)."
        ))),
    }
}

/// The IAM user (or service account) whose long-term keys signed a call for temporary
/// credentials: neither the root user nor a session may ask (as in AWS, where a session cannot
/// call GetSessionToken, and Quarry's sessions have no role to chain).
fn long_term_user<'c>(caller: &'c Caller, action: &str) -> Result<&'c Identity, IamError> {
    let id = match caller {
        Caller::User(id) => id,
        Caller::Root => {
            return Err(IamError::AccessDenied(format!(
                "The root user cannot call {action}: call it with the keys of an IAM user."
            )))
        }
        Caller::Anonymous => return Err(IamError::AccessDenied("Access Denied.".into())),
    };
    if id.access_key.starts_with(SESSION_KEY_PREFIX) {
        return Err(IamError::AccessDenied(format!(
            "Temporary credentials cannot call {action}: call it with the keys of an IAM user."
        )));
    }
    Ok(id)
}

/// `DurationSeconds` within `min..=max`, `default` when absent.
fn duration_seconds(call: &QueryCall, min: u64, max: u64, default: u64) -> Result<u64, IamError> {
    match call.get("DurationSeconds") {
        None => Ok(default),
        Some(d) => d
            .parse::<u64>()
            .ok()
            .filter(|d| (min..=max).contains(d))
            .ok_or_else(|| {
                IamError::Validation(format!(
                    "DurationSeconds {d:?} is invalid: it must be {min} to {max}."
                ))
            }),
    }
}

/// `AssumeRole`: temporary credentials acting as the caller (an IAM user or service account),
/// narrowed by `Policy` when given. `RoleArn` is accepted and not looked up (there are no roles);
/// `RoleSessionName` (2 to 64 of letters, digits and `+=,.@-_`) names the session;
/// `DurationSeconds` is 900 to 43200 (default 3600).
fn assume_role(iam: &Iam, caller: &Caller, call: &QueryCall) -> Result<Answer, IamError> {
    let id = long_term_user(caller, "AssumeRole")?;
    let name = call.get("RoleSessionName").unwrap_or("session");
    let name_ok = (2..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c));
    if !name_ok {
        return Err(IamError::Validation(format!(
            "RoleSessionName {name:?} is invalid: 2 to 64 characters of letters, digits and +=,.@_-."
        )));
    }
    let duration = duration_seconds(call, MIN_DURATION, MAX_DURATION, DEFAULT_DURATION)?;
    let policy = match call.get("Policy").filter(|p| !p.is_empty()) {
        None => None,
        Some(doc) => {
            check_session_policy(doc)?;
            Some(doc.to_owned())
        }
    };
    let session = iam.issue_session(&id.access_key, duration, policy);
    Ok(Answer::AssumeRole(
        session,
        id.arn.clone(),
        id.user_id.clone(),
        name.to_owned(),
    ))
}

/// `GetSessionToken`: temporary credentials with exactly the caller's permissions, for
/// `DurationSeconds` 900 to 129600 (default 43200, AWS's figures for an IAM user). There are no
/// MFA devices here, so a call naming one (`SerialNumber`, `TokenCode`) is refused rather than
/// answered with credentials that look MFA-authenticated and are not.
fn get_session_token(iam: &Iam, caller: &Caller, call: &QueryCall) -> Result<Answer, IamError> {
    let id = long_term_user(caller, "GetSessionToken")?;
    if call.get("SerialNumber").is_some() || call.get("TokenCode").is_some() {
        return Err(IamError::AccessDenied(
            "MFA authentication failed: this server has no MFA devices; call GetSessionToken without SerialNumber and TokenCode.".into(),
        ));
    }
    let duration = duration_seconds(
        call,
        MIN_DURATION,
        MAX_TOKEN_DURATION,
        DEFAULT_TOKEN_DURATION,
    )?;
    Ok(Answer::SessionToken(iam.issue_session(
        &id.access_key,
        duration,
        None,
    )))
}

pub(crate) fn now() -> String {
    time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .map(rfc3339)
        .unwrap_or_default()
}

/// IAM's timestamps: RFC 3339, UTC.
fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// `AIDA` + 17 characters, IAM's shape of an id.
fn new_id(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        random_chars(17, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
    )
}

fn random_chars(n: usize, alphabet: &[u8]) -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..n)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
        .collect()
}

/// A new access key id and secret.
pub fn new_key_pair() -> (String, String) {
    (
        new_id("QKIA").chars().take(20).collect(),
        random_chars(
            40,
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        ),
    )
}

/// IAM's name rule: 1 to `max` characters of letters, digits and `+=,.@_-`.
fn check_name(what: &str, name: &str, max: usize) -> Result<(), IamError> {
    let ok = !name.is_empty()
        && name.len() <= max
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(IamError::InvalidInput(format!(
            "The specified value for {what} is invalid: 1 to {max} characters of letters, digits and +=,.@_-."
        )))
    }
}

pub(crate) fn check_document(doc: &str) -> Result<(), IamError> {
    if doc.len() > MAX_POLICY {
        return Err(IamError::LimitExceeded(format!(
            "The policy document is {} bytes; at most {MAX_POLICY} are accepted.",
            doc.len()
        )));
    }
    Policy::parse_submitted_identity(doc)
        .map(|_| ())
        .map_err(|e| IamError::MalformedPolicyDocument(e.to_string()))
}

fn no_user(name: &str) -> IamError {
    IamError::NoSuchEntity(format!("The user with name {name} cannot be found."))
}

fn no_group(name: &str) -> IamError {
    IamError::NoSuchEntity(format!("The group with name {name} cannot be found."))
}

/// The policy name of a `PolicyArn` of this account.
fn policy_name(arn: &str) -> Result<&str, IamError> {
    arn.strip_prefix(&format!("arn:aws:iam::{ACCOUNT_ID}:policy/"))
        .map(|n| n.rsplit('/').next().unwrap_or(n))
        .filter(|n| !n.is_empty())
        .ok_or_else(|| IamError::InvalidInput(format!("{arn:?} is not a policy ARN of this account (arn:aws:iam::{ACCOUNT_ID}:policy/NAME).")))
}

fn user_mut<'s>(state: &'s mut IamState, name: &str) -> Result<&'s mut User, IamError> {
    state.users.get_mut(name).ok_or_else(|| no_user(name))
}

fn group_mut<'s>(state: &'s mut IamState, name: &str) -> Result<&'s mut Group, IamError> {
    state.groups.get_mut(name).ok_or_else(|| no_group(name))
}

fn attachments(state: &IamState, policy: &str) -> usize {
    state
        .users
        .values()
        .filter(|u| u.attached.contains(policy))
        .count()
        + state
            .groups
            .values()
            .filter(|g| g.attached.contains(policy))
            .count()
}

/// The user a call is about: `UserName`, else the caller itself (IAM's rule for the
/// self-service calls); the root user has no user name.
fn subject(caller: &Caller, call: &QueryCall) -> Result<String, IamError> {
    match (call.get("UserName").filter(|u| !u.is_empty()), caller) {
        (Some(u), _) => Ok(u.to_owned()),
        (None, Caller::User(id)) => Ok(id.user.clone()),
        (None, Caller::Anonymous) => {
            Err(IamError::InvalidInput("The request is not signed.".into()))
        }
        (None, Caller::Root) => Err(IamError::InvalidInput(format!(
            "UserName is required for {} by the root user.",
            call.action
        ))),
    }
}

async fn run(iam: &Iam, caller: &Caller, call: &QueryCall) -> Result<Answer, IamError> {
    let snap = iam.snapshot();
    let state = &snap.state;
    match call.action.as_str() {
        // ---- users ----
        "CreateUser" => {
            let name = call.required("UserName")?.to_owned();
            check_name("UserName", &name, 64)?;
            iam.update(move |s, _| {
                // User names are unique case-insensitively in IAM.
                if s.users.keys().any(|u| u.eq_ignore_ascii_case(&name)) {
                    return Err(IamError::EntityAlreadyExists(format!("User with name {name} already exists.")));
                }
                let user = User {
                    id: new_id("AIDA"),
                    created: now(),
                    enabled: true,
                    inline: BTreeMap::new(),
                    attached: Default::default(),
                };
                s.users.insert(name.clone(), user.clone());
                Ok(Answer::User(name, user))
            })
            .await
        }
        "GetUser" => {
            let name = subject(caller, call)?;
            let u = state.users.get(&name).ok_or_else(|| no_user(&name))?;
            Ok(Answer::User(name, u.clone()))
        }
        "ListUsers" => Ok(Answer::Users(
            state.users.iter().map(|(n, u)| (n.clone(), u.clone())).collect(),
        )),
        "DeleteUser" => {
            let name = call.required("UserName")?.to_owned();
            iam.update(move |s, _| {
                let u = s.users.get(&name).ok_or_else(|| no_user(&name))?;
                let has_keys = s.keys.values().any(|k| match &k.owner {
                    KeyOwner::User(o) => *o == name,
                    KeyOwner::ServiceAccount { parent, .. } => *parent == name,
                });
                let in_group = s.groups.values().any(|g| g.members.contains(&name));
                if has_keys || in_group || !u.inline.is_empty() || !u.attached.is_empty() {
                    return Err(IamError::DeleteConflict(format!(
                        "Cannot delete entity, must delete access keys, policies and group memberships of user {name} first."
                    )));
                }
                s.users.remove(&name);
                Ok(Answer::Empty)
            })
            .await
        }
        // ---- access keys ----
        "CreateAccessKey" => {
            let user = subject(caller, call)?;
            iam.update(move |s, secrets| {
                if !s.users.contains_key(&user) {
                    return Err(no_user(&user));
                }
                let owned = s.keys.values().filter(|k| k.owner == KeyOwner::User(user.clone())).count();
                if owned >= MAX_KEYS_PER_USER {
                    return Err(IamError::LimitExceeded(format!(
                        "Cannot exceed quota for AccessKeysPerUser: {MAX_KEYS_PER_USER}"
                    )));
                }
                let (ak, secret) = new_key_pair();
                let key = AccessKey {
                    owner: KeyOwner::User(user.clone()),
                    sealed_secret: secrets.seal(&ak, &secret),
                    active: true,
                    created: now(),
                };
                s.keys.insert(ak.clone(), key.clone());
                Ok(Answer::AccessKey(user, ak, secret, key))
            })
            .await
        }
        "ListAccessKeys" => {
            let user = subject(caller, call)?;
            if !state.users.contains_key(&user) {
                return Err(no_user(&user));
            }
            Ok(Answer::AccessKeys(
                user.clone(),
                state
                    .keys
                    .iter()
                    .filter(|(_, k)| k.owner == KeyOwner::User(user.clone()))
                    .map(|(a, k)| (a.clone(), k.clone()))
                    .collect(),
            ))
        }
        "UpdateAccessKey" | "DeleteAccessKey" => {
            let user = subject(caller, call)?;
            let ak = call.required("AccessKeyId")?.to_owned();
            let active = match (call.action.as_str(), call.get("Status")) {
                ("DeleteAccessKey", _) => None,
                (_, Some("Active")) => Some(true),
                (_, Some("Inactive")) => Some(false),
                (_, other) => {
                    return Err(IamError::InvalidInput(format!(
                        "Status must be Active or Inactive, not {other:?}."
                    )))
                }
            };
            iam.update(move |s, _| {
                let owned = s.keys.get(&ak).is_some_and(|k| k.owner == KeyOwner::User(user.clone()));
                if !owned {
                    return Err(IamError::NoSuchEntity(format!(
                        "The Access Key with id {ak} cannot be found."
                    )));
                }
                match active {
                    None => {
                        s.keys.remove(&ak);
                    }
                    Some(a) => {
                        if let Some(k) = s.keys.get_mut(&ak) {
                            k.active = a;
                        }
                    }
                }
                Ok(Answer::Empty)
            })
            .await
        }
        // ---- inline policies ----
        "PutUserPolicy" | "PutGroupPolicy" => {
            let group = call.action == "PutGroupPolicy";
            let owner = call.required(if group { "GroupName" } else { "UserName" })?.to_owned();
            let name = call.required("PolicyName")?.to_owned();
            check_name("PolicyName", &name, 128)?;
            let doc = call.required("PolicyDocument")?.to_owned();
            check_document(&doc)?;
            iam.update(move |s, _| {
                let inline = if group {
                    &mut group_mut(s, &owner)?.inline
                } else {
                    &mut user_mut(s, &owner)?.inline
                };
                inline.insert(name, doc);
                Ok(Answer::Empty)
            })
            .await
        }
        "GetUserPolicy" | "GetGroupPolicy" => {
            let group = call.action == "GetGroupPolicy";
            let tag = if group { "GroupName" } else { "UserName" };
            let owner = call.required(tag)?.to_owned();
            let name = call.required("PolicyName")?.to_owned();
            let inline = if group {
                &state.groups.get(&owner).ok_or_else(|| no_group(&owner))?.inline
            } else {
                &state.users.get(&owner).ok_or_else(|| no_user(&owner))?.inline
            };
            let doc = inline.get(&name).ok_or_else(|| {
                IamError::NoSuchEntity(format!("The {} policy with name {name} cannot be found.", if group { "group" } else { "user" }))
            })?;
            Ok(Answer::InlinePolicy(tag, owner, name, doc.clone()))
        }
        "ListUserPolicies" | "ListGroupPolicies" => {
            let inline = if call.action == "ListGroupPolicies" {
                let g = call.required("GroupName")?;
                &state.groups.get(g).ok_or_else(|| no_group(g))?.inline
            } else {
                let u = call.required("UserName")?;
                &state.users.get(u).ok_or_else(|| no_user(u))?.inline
            };
            Ok(Answer::Names("PolicyNames", inline.keys().cloned().collect()))
        }
        "DeleteUserPolicy" | "DeleteGroupPolicy" => {
            let group = call.action == "DeleteGroupPolicy";
            let owner = call.required(if group { "GroupName" } else { "UserName" })?.to_owned();
            let name = call.required("PolicyName")?.to_owned();
            iam.update(move |s, _| {
                let inline = if group {
                    &mut group_mut(s, &owner)?.inline
                } else {
                    &mut user_mut(s, &owner)?.inline
                };
                inline.remove(&name).ok_or_else(|| {
                    IamError::NoSuchEntity(format!("The policy with name {name} cannot be found."))
                })?;
                Ok(Answer::Empty)
            })
            .await
        }
        // ---- managed policies ----
        "CreatePolicy" => {
            let name = call.required("PolicyName")?.to_owned();
            check_name("PolicyName", &name, 128)?;
            let doc = call.required("PolicyDocument")?.to_owned();
            check_document(&doc)?;
            iam.update(move |s, _| {
                if s.policies.contains_key(&name) {
                    return Err(IamError::EntityAlreadyExists(format!(
                        "A policy called {name} already exists. Duplicate names are not allowed."
                    )));
                }
                let p = ManagedPolicy {
                    id: new_id("ANPA"),
                    created: now(),
                    document: doc,
                };
                s.policies.insert(name.clone(), p.clone());
                Ok(Answer::Policy(name, p, 0))
            })
            .await
        }
        "GetPolicy" => {
            let name = policy_name(call.required("PolicyArn")?)?;
            let p = state.policies.get(name).ok_or_else(|| {
                IamError::NoSuchEntity(format!("Policy {} was not found.", policy_arn(name)))
            })?;
            Ok(Answer::Policy(name.to_owned(), p.clone(), attachments(state, name)))
        }
        // Policies have one version, v1 (SetDefaultPolicyVersion and CreatePolicyVersion are
        // not answered).
        "GetPolicyVersion" => {
            let name = policy_name(call.required("PolicyArn")?)?;
            let version = call.required("VersionId")?;
            let p = state.policies.get(name).filter(|_| version == "v1").ok_or_else(|| {
                IamError::NoSuchEntity(format!(
                    "Policy {} version {version} does not exist.",
                    policy_arn(name)
                ))
            })?;
            Ok(Answer::PolicyVersion(p.document.clone(), p.created.clone()))
        }
        "ListPolicies" => Ok(Answer::Policies(
            state
                .policies
                .iter()
                .map(|(n, p)| (n.clone(), p.clone(), attachments(state, n)))
                .collect(),
        )),
        "DeletePolicy" => {
            let name = policy_name(call.required("PolicyArn")?)?.to_owned();
            iam.update(move |s, _| {
                if !s.policies.contains_key(&name) {
                    return Err(IamError::NoSuchEntity(format!("Policy {} was not found.", policy_arn(&name))));
                }
                if attachments(s, &name) > 0 {
                    return Err(IamError::DeleteConflict(format!(
                        "Cannot delete a policy attached to entities: detach {name} first."
                    )));
                }
                s.policies.remove(&name);
                Ok(Answer::Empty)
            })
            .await
        }
        "AttachUserPolicy" | "DetachUserPolicy" | "AttachGroupPolicy" | "DetachGroupPolicy" => {
            let group = call.action.ends_with("GroupPolicy");
            let attach = call.action.starts_with("Attach");
            let owner = call.required(if group { "GroupName" } else { "UserName" })?.to_owned();
            let name = policy_name(call.required("PolicyArn")?)?.to_owned();
            iam.update(move |s, _| {
                if !s.policies.contains_key(&name) {
                    return Err(IamError::NoSuchEntity(format!("Policy {} was not found.", policy_arn(&name))));
                }
                let attached = if group {
                    &mut group_mut(s, &owner)?.attached
                } else {
                    &mut user_mut(s, &owner)?.attached
                };
                if attach {
                    attached.insert(name);
                } else if !attached.remove(&name) {
                    return Err(IamError::NoSuchEntity(format!(
                        "Policy {} is not attached to {owner}.",
                        policy_arn(&name)
                    )));
                }
                Ok(Answer::Empty)
            })
            .await
        }
        "ListAttachedUserPolicies" | "ListAttachedGroupPolicies" => {
            let attached = if call.action == "ListAttachedGroupPolicies" {
                let g = call.required("GroupName")?;
                &state.groups.get(g).ok_or_else(|| no_group(g))?.attached
            } else {
                let u = call.required("UserName")?;
                &state.users.get(u).ok_or_else(|| no_user(u))?.attached
            };
            Ok(Answer::Attached(attached.iter().cloned().collect()))
        }
        // ---- groups ----
        "CreateGroup" => {
            let name = call.required("GroupName")?.to_owned();
            check_name("GroupName", &name, 128)?;
            iam.update(move |s, _| {
                if s.groups.keys().any(|g| g.eq_ignore_ascii_case(&name)) {
                    return Err(IamError::EntityAlreadyExists(format!("Group with name {name} already exists.")));
                }
                let g = Group {
                    id: new_id("AGPA"),
                    created: now(),
                    members: Default::default(),
                    inline: BTreeMap::new(),
                    attached: Default::default(),
                };
                s.groups.insert(name.clone(), g.clone());
                Ok(Answer::Group(name, g, Vec::new()))
            })
            .await
        }
        "GetGroup" => {
            let name = call.required("GroupName")?;
            let g = state.groups.get(name).ok_or_else(|| no_group(name))?;
            let users = g
                .members
                .iter()
                .filter_map(|m| Some((m.clone(), state.users.get(m)?.clone())))
                .collect();
            Ok(Answer::Group(name.to_owned(), g.clone(), users))
        }
        "ListGroups" => Ok(Answer::Groups(
            "Groups",
            state.groups.iter().map(|(n, g)| (n.clone(), g.clone())).collect(),
        )),
        "ListGroupsForUser" => {
            let u = call.required("UserName")?;
            if !state.users.contains_key(u) {
                return Err(no_user(u));
            }
            Ok(Answer::Groups(
                "Groups",
                state
                    .groups
                    .iter()
                    .filter(|(_, g)| g.members.contains(u))
                    .map(|(n, g)| (n.clone(), g.clone()))
                    .collect(),
            ))
        }
        "DeleteGroup" => {
            let name = call.required("GroupName")?.to_owned();
            iam.update(move |s, _| {
                let g = s.groups.get(&name).ok_or_else(|| no_group(&name))?;
                if !g.members.is_empty() || !g.inline.is_empty() || !g.attached.is_empty() {
                    return Err(IamError::DeleteConflict(format!(
                        "Cannot delete entity, must remove users and policies from group {name} first."
                    )));
                }
                s.groups.remove(&name);
                Ok(Answer::Empty)
            })
            .await
        }
        "AddUserToGroup" | "RemoveUserFromGroup" => {
            let add = call.action == "AddUserToGroup";
            let group = call.required("GroupName")?.to_owned();
            let user = call.required("UserName")?.to_owned();
            iam.update(move |s, _| {
                if !s.users.contains_key(&user) {
                    return Err(no_user(&user));
                }
                let g = group_mut(s, &group)?;
                if add {
                    g.members.insert(user);
                } else if !g.members.remove(&user) {
                    return Err(IamError::NoSuchEntity(format!(
                        "User {user} is not in group {group}."
                    )));
                }
                Ok(Answer::Empty)
            })
            .await
        }
        other => Err(IamError::InvalidAction(format!(
            "Could not find operation {other} for version 2010-05-08 (see the README for the IAM calls Quarry answers)."
        ))),
    }
}
