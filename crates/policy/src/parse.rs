//! The policy document grammar: JSON in, a checked [`Policy`] out.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::condition::Condition;
use crate::error::PolicyError;
use crate::pattern::Pattern;

/// The policy language version. Only `2012-10-17` has policy variables; a document without
/// `Version` is `2008-10-17`, as in AWS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V2008_10_17,
    V2012_10_17,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V2008_10_17 => "2008-10-17",
            Version::V2012_10_17 => "2012-10-17",
        }
    }
}

/// Where a policy is attached, which decides whether its statements name a principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Attached to an identity (user, group, service account, session): no `Principal`.
    Identity,
    /// Attached to a resource (a bucket): every statement has `Principal` or `NotPrincipal`.
    Resource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Allow,
    Deny,
}

/// `Action` / `NotAction`, `Resource` / `NotResource`: patterns, and whether the element is the
/// `Not` form (it then matches what none of the patterns matches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringSet {
    pub negated: bool,
    pub patterns: Vec<Pattern>,
}

/// `Principal` / `NotPrincipal`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrincipalSpec {
    pub negated: bool,
    /// `"*"` or `{"AWS": "*"}`: everyone, anonymous callers included.
    pub any: bool,
    /// The listed identifiers (ARNs, account ids, canonical ids), of any principal type.
    pub ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub sid: Option<String>,
    pub effect: Effect,
    pub action: StringSet,
    /// `None` only where a policy may leave it out (never, for the kinds above: kept optional
    /// for documents of other services).
    pub resource: Option<StringSet>,
    pub principal: Option<PrincipalSpec>,
    pub conditions: Vec<Condition>,
}

/// A parsed, checked policy document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub version: Version,
    pub id: Option<String>,
    pub statements: Vec<Statement>,
}

impl Policy {
    /// Whether a condition of some statement looks at a key starting with `prefix` (ASCII case
    /// insensitive), as `s3:ExistingObjectTag/`: a caller can skip gathering keys no policy
    /// reads.
    pub fn uses_condition_key_prefix(&self, prefix: &str) -> bool {
        self.statements.iter().any(|st| {
            st.conditions.iter().any(|c| {
                c.key
                    .get(..prefix.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
            })
        })
    }

    /// An identity policy (user, group, service account or session policy), as stored.
    pub fn parse_identity(json: &str) -> Result<Policy, PolicyError> {
        Policy::parse(json, PolicyKind::Identity)
    }

    /// An identity policy being submitted (IAM's PutUserPolicy, CreatePolicy, a session
    /// policy, ...): [`Policy::parse_identity`] and IAM's rules for new documents on top (each
    /// Sid once), which a stored document is not held to.
    pub fn parse_submitted_identity(json: &str) -> Result<Policy, PolicyError> {
        let p = Policy::parse_identity(json)?;
        p.check_unique_sids()?;
        Ok(p)
    }

    /// A resource policy (a bucket policy).
    pub fn parse_resource(json: &str) -> Result<Policy, PolicyError> {
        Policy::parse(json, PolicyKind::Resource)
    }

    pub fn parse(json: &str, kind: PolicyKind) -> Result<Policy, PolicyError> {
        let value: Value =
            serde_json::from_str(json).map_err(|e| PolicyError::Json(e.to_string()))?;
        Policy::from_value(&value, kind)
    }

    pub fn from_value(value: &Value, kind: PolicyKind) -> Result<Policy, PolicyError> {
        let top = value
            .as_object()
            .ok_or_else(|| PolicyError::Json("the policy must be a JSON object".into()))?;
        let doc = |field: &str, reason: String| PolicyError::Malformed {
            statement: None,
            sid: None,
            field: field.to_owned(),
            reason,
        };
        for key in top.keys() {
            if !matches!(key.as_str(), "Version" | "Id" | "Statement") {
                return Err(doc(key, "unknown field".into()));
            }
        }
        let version = match top.get("Version") {
            None => Version::V2008_10_17,
            Some(Value::String(v)) if v == "2012-10-17" => Version::V2012_10_17,
            Some(Value::String(v)) if v == "2008-10-17" => Version::V2008_10_17,
            Some(v) => {
                return Err(doc(
                    "Version",
                    format!("{v} is not a policy version (2012-10-17 or 2008-10-17)"),
                ))
            }
        };
        let id = match top.get("Id") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(doc("Id", "must be a string".into())),
        };
        let raw: Vec<&Value> = match top.get("Statement") {
            None => return Err(doc("Statement", "missing".into())),
            Some(Value::Array(a)) if a.is_empty() => {
                return Err(doc("Statement", "must hold at least one statement".into()))
            }
            Some(Value::Array(a)) => a.iter().collect(),
            Some(v @ Value::Object(_)) => vec![v],
            Some(_) => {
                return Err(doc(
                    "Statement",
                    "must be a statement object or an array of them".into(),
                ))
            }
        };
        let mut statements = Vec::with_capacity(raw.len());
        for (i, st) in raw.into_iter().enumerate() {
            statements.push(parse_statement(i + 1, st, kind, version)?);
        }
        Ok(Policy {
            version,
            id,
            statements,
        })
    }

    /// IAM's rule for a new identity policy: "the Sid value must be unique within a JSON
    /// policy" (a bucket policy's Sids are only labels). Checked where a document is submitted,
    /// not where a stored one is read: a document stored before this rule still reads, so a Deny
    /// in it keeps denying.
    fn check_unique_sids(&self) -> Result<(), PolicyError> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, st) in self.statements.iter().enumerate() {
            let Some(sid) = st.sid.as_deref() else {
                continue;
            };
            if let Some(first) = seen.insert(sid, i) {
                return Err(Place {
                    n: i + 1,
                    sid: Some(sid),
                }
                .err(
                    "Sid",
                    format!(
                        "statement {} has the same Sid; each Sid in a policy is unique",
                        first + 1
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Builds the error of one statement's field.
pub(crate) struct Place<'a> {
    pub n: usize,
    pub sid: Option<&'a str>,
}

impl Place<'_> {
    pub(crate) fn err(&self, field: impl Into<String>, reason: impl Into<String>) -> PolicyError {
        PolicyError::Malformed {
            statement: Some(self.n),
            sid: self.sid.map(str::to_owned),
            field: field.into(),
            reason: reason.into(),
        }
    }
}

fn parse_statement(
    n: usize,
    value: &Value,
    kind: PolicyKind,
    version: Version,
) -> Result<Statement, PolicyError> {
    let obj = value
        .as_object()
        .ok_or_else(|| Place { n, sid: None }.err("Statement", "must be a JSON object"))?;
    let sid = match obj.get("Sid") {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(Place { n, sid: None }.err("Sid", "must be a string")),
    };
    let at = Place { n, sid };
    for key in obj.keys() {
        if !matches!(
            key.as_str(),
            "Sid"
                | "Effect"
                | "Action"
                | "NotAction"
                | "Resource"
                | "NotResource"
                | "Principal"
                | "NotPrincipal"
                | "Condition"
        ) {
            return Err(at.err(key.as_str(), "unknown field"));
        }
    }
    let effect = match obj.get("Effect") {
        Some(Value::String(e)) if e == "Allow" => Effect::Allow,
        Some(Value::String(e)) if e == "Deny" => Effect::Deny,
        Some(v) => return Err(at.err("Effect", format!("{v} is neither \"Allow\" nor \"Deny\""))),
        None => return Err(at.err("Effect", "missing")),
    };
    let variables = version == Version::V2012_10_17;
    let action = one_of(&at, obj, "Action", "NotAction")?
        .ok_or_else(|| at.err("Action", "missing (one of Action or NotAction is required)"))?;
    let action = string_set(&at, action, false, |field, s| check_action(&at, field, s))?;
    let resource = one_of(&at, obj, "Resource", "NotResource")?.ok_or_else(|| {
        at.err(
            "Resource",
            "missing (one of Resource or NotResource is required)",
        )
    })?;
    let resource = string_set(&at, resource, variables, |field, s| {
        check_resource(&at, field, s)
    })?;
    let principal = one_of(&at, obj, "Principal", "NotPrincipal")?;
    let principal = match (kind, principal) {
        (PolicyKind::Identity, Some((field, _))) => return Err(at.err(
            field,
            "an identity policy names no principal: it applies to the identity it is attached to",
        )),
        (PolicyKind::Resource, None) => {
            return Err(at.err(
                "Principal",
                "missing (a bucket policy statement needs Principal or NotPrincipal)",
            ))
        }
        (PolicyKind::Identity, None) => None,
        (PolicyKind::Resource, Some((field, v))) => {
            Some(parse_principal(&at, field, v, field == "NotPrincipal")?)
        }
    };
    let conditions = match obj.get("Condition") {
        None => Vec::new(),
        Some(v) => crate::condition::parse_block(&at, v, variables)?,
    };
    Ok(Statement {
        sid: sid.map(str::to_owned),
        effect,
        action,
        resource: Some(resource),
        principal,
        conditions,
    })
}

/// The element present of `name` / `Not<name>`: both is an error.
fn one_of<'v>(
    at: &Place<'_>,
    obj: &'v Map<String, Value>,
    name: &'static str,
    not: &'static str,
) -> Result<Option<(&'static str, &'v Value)>, PolicyError> {
    match (obj.get(name), obj.get(not)) {
        (Some(_), Some(_)) => Err(at.err(name, format!("{name} and {not} cannot both be given"))),
        (Some(v), None) => Ok(Some((name, v))),
        (None, Some(v)) => Ok(Some((not, v))),
        (None, None) => Ok(None),
    }
}

/// A string or a non-empty array of strings.
pub(crate) fn strings<'v>(
    at: &Place<'_>,
    field: &str,
    value: &'v Value,
) -> Result<Vec<&'v str>, PolicyError> {
    match value {
        Value::String(s) => Ok(vec![s.as_str()]),
        Value::Array(a) if a.is_empty() => Err(at.err(field, "must not be an empty list")),
        Value::Array(a) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| at.err(field, format!("{v} is not a string")))
            })
            .collect(),
        other => Err(at.err(
            field,
            format!("{other} is neither a string nor a list of strings"),
        )),
    }
}

fn string_set(
    at: &Place<'_>,
    (field, value): (&'static str, &Value),
    variables: bool,
    check: impl Fn(&str, &str) -> Result<(), PolicyError>,
) -> Result<StringSet, PolicyError> {
    let mut patterns = Vec::new();
    for s in strings(at, field, value)? {
        check(field, s)?;
        patterns.push(Pattern::compile(s, variables, true).map_err(|e| at.err(field, e))?);
    }
    Ok(StringSet {
        negated: field.starts_with("Not"),
        patterns,
    })
}

/// `*` or `service:action` (wildcards allowed in the action part).
fn check_action(at: &Place<'_>, field: &str, s: &str) -> Result<(), PolicyError> {
    if s == "*" {
        return Ok(());
    }
    let ok = s.split_once(':').is_some_and(|(service, action)| {
        !service.is_empty()
            && service
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !action.is_empty()
            && action
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '*' || c == '?' || c == '-' || c == '_')
    });
    if ok {
        Ok(())
    } else {
        Err(at.err(
            field,
            format!("{s:?} is not an action (service:Action, e.g. s3:GetObject)"),
        ))
    }
}

/// `*` or an ARN: `arn:partition:service:region:account:resource`.
fn check_resource(at: &Place<'_>, field: &str, s: &str) -> Result<(), PolicyError> {
    if s == "*" || (s.starts_with("arn:") && s.splitn(6, ':').count() == 6) {
        Ok(())
    } else {
        Err(at.err(
            field,
            format!("{s:?} is not a resource ARN (arn:aws:s3:::bucket/key) or \"*\""),
        ))
    }
}

fn parse_principal(
    at: &Place<'_>,
    field: &str,
    value: &Value,
    negated: bool,
) -> Result<PrincipalSpec, PolicyError> {
    let mut spec = PrincipalSpec {
        negated,
        any: false,
        ids: Vec::new(),
    };
    match value {
        Value::String(s) if s == "*" => spec.any = true,
        Value::Object(map) if !map.is_empty() => {
            for (kind, ids) in map {
                if !matches!(
                    kind.as_str(),
                    "AWS" | "CanonicalUser" | "Federated" | "Service"
                ) {
                    return Err(at.err(
                        format!("{field}.{kind}"),
                        "unknown principal type (AWS, CanonicalUser, Federated or Service)",
                    ));
                }
                for id in strings(at, &format!("{field}.{kind}"), ids)? {
                    if id == "*" && kind == "AWS" {
                        spec.any = true;
                    } else if id.is_empty() || (id.contains('*') || id.contains('?')) {
                        return Err(at.err(
                            format!("{field}.{kind}"),
                            format!("{id:?} is not a principal (wildcards are allowed only as \"*\" alone)"),
                        ));
                    } else {
                        spec.ids.push(id.to_owned());
                    }
                }
            }
        }
        other => {
            return Err(at.err(
                field,
                format!(
                    "{other} is not a principal (\"*\" or an object such as {{\"AWS\": [...]}})"
                ),
            ))
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {

    #[test]
    fn condition_key_prefixes_are_found_in_any_case() {
        let p = Policy::parse_identity(
            r#"{"Version":"2012-10-17","Statement":[
                {"Effect":"Allow","Action":"s3:GetObject","Resource":"*"},
                {"Effect":"Deny","Action":"s3:GetObject","Resource":"*",
                 "Condition":{"StringEquals":{"S3:EXISTINGOBJECTTAG/class":"secret"}}}]}"#,
        )
        .unwrap();
        assert!(p.uses_condition_key_prefix("s3:ExistingObjectTag/"));
        assert!(!p.uses_condition_key_prefix("s3:RequestObjectTag/"));
        let plain = Policy::parse_identity(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}"#,
        )
        .unwrap();
        assert!(!plain.uses_condition_key_prefix("s3:ExistingObjectTag/"));
    }
    use super::*;

    fn err(json: &str, kind: PolicyKind) -> String {
        Policy::parse(json, kind).unwrap_err().to_string()
    }

    #[test]
    fn statement_as_object_or_array() {
        let one = r#"{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}}"#;
        let p = Policy::parse_identity(one).unwrap();
        assert_eq!(p.statements.len(), 1);
        assert_eq!(p.version, Version::V2012_10_17);
        let many = r#"{"Statement":[{"Sid":"A","Effect":"Deny","NotAction":["s3:Get*","s3:List*"],"NotResource":"*"},
            {"Effect":"Allow","Action":"*","Resource":["*"]}]}"#;
        let p = Policy::parse_identity(many).unwrap();
        assert_eq!(p.version, Version::V2008_10_17);
        assert!(p.statements[0].action.negated);
        assert_eq!(p.statements[0].sid.as_deref(), Some("A"));
    }

    #[test]
    fn a_submitted_identity_policy_has_each_sid_once() {
        let twice = Policy::parse_identity(
            r#"{"Version":"2012-10-17","Statement":[
                {"Sid":"A","Effect":"Allow","Action":"s3:GetObject","Resource":"*"},
                {"Sid":"B","Effect":"Allow","Action":"s3:PutObject","Resource":"*"},
                {"Sid":"A","Effect":"Deny","Action":"s3:DeleteObject","Resource":"*"}]}"#,
        )
        .expect("a stored document with a Sid twice still reads");
        let e = twice.check_unique_sids().unwrap_err().to_string();
        assert!(
            e.starts_with("Statement 3 (Sid \"A\"): Sid:") && e.contains("statement 1"),
            "{e}"
        );
        // Distinct Sids, and statements without one, are fine.
        Policy::parse_submitted_identity(
            r#"{"Statement":[{"Sid":"A","Effect":"Allow","Action":"*","Resource":"*"},
                {"Effect":"Allow","Action":"*","Resource":"*"},{"Effect":"Deny","Action":"*","Resource":"*"}]}"#,
        )
        .unwrap();
    }

    #[test]
    fn errors_name_the_statement_and_field() {
        let id = PolicyKind::Identity;
        let e = err(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"},
                {"Sid":"Two","Effect":"Allow","Action":"GetObject","Resource":"*"}]}"#,
            id,
        );
        assert!(e.starts_with("Statement 2 (Sid \"Two\"): Action:"), "{e}");
        let e = err(
            r#"{"Statement":[{"Effect":"Maybe","Action":"*","Resource":"*"}]}"#,
            id,
        );
        assert!(e.starts_with("Statement 1: Effect:"), "{e}");
        let e = err(r#"{"Statement":[{"Effect":"Allow","Resource":"*"}]}"#, id);
        assert!(e.contains("Action: missing"), "{e}");
        let e = err(r#"{"Statement":[{"Effect":"Allow","Action":"*"}]}"#, id);
        assert!(e.contains("Resource: missing"), "{e}");
        let e = err(
            r#"{"Statement":[{"Effect":"Allow","Action":"*","NotAction":"*","Resource":"*"}]}"#,
            id,
        );
        assert!(e.contains("cannot both"), "{e}");
        let e = err(
            r#"{"Statement":[{"Effect":"Allow","Action":"*","Resource":"bucket"}]}"#,
            id,
        );
        assert!(
            e.contains("Resource: \"bucket\" is not a resource ARN"),
            "{e}"
        );
        let e = err(
            r#"{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*","Principal":"*"}]}"#,
            id,
        );
        assert!(
            e.contains("Principal: an identity policy names no principal"),
            "{e}"
        );
        let e = err(
            r#"{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#,
            PolicyKind::Resource,
        );
        assert!(e.contains("Principal: missing"), "{e}");
        let e = err(
            r#"{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*","Principal":{"AWS":"arn:*"}}]}"#,
            PolicyKind::Resource,
        );
        assert!(e.contains("Principal.AWS"), "{e}");
        let e = err(
            r#"{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*","Extra":1}]}"#,
            id,
        );
        assert!(e.contains("Extra: unknown field"), "{e}");
        let e = err(r#"{"Version":"2020-01-01","Statement":[]}"#, id);
        assert!(e.starts_with("Version:"), "{e}");
        let e = err(r#"{"Version":"2012-10-17","Statement":[]}"#, id);
        assert!(e.starts_with("Statement: must hold"), "{e}");
        let e = err(r#"[1,2]"#, id);
        assert!(e.contains("JSON object"), "{e}");
        let e = err(r#"{"Statement": "#, id);
        assert!(e.contains("not a valid JSON"), "{e}");
        let e = err(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"arn:aws:s3:::${oops"}]}"#,
            id,
        );
        assert!(e.contains("Resource: the policy variable"), "{e}");
    }

    #[test]
    fn principals() {
        let p = Policy::parse_resource(
            r#"{"Statement":[{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam::1:user/a","1"],"CanonicalUser":"c"},"Action":"s3:*","Resource":"*"}]}"#,
        )
        .unwrap();
        let spec = p.statements[0].principal.as_ref().unwrap();
        assert!(!spec.any && !spec.negated);
        assert_eq!(spec.ids, ["arn:aws:iam::1:user/a", "1", "c"]);
        let p = Policy::parse_resource(
            r#"{"Statement":[{"Effect":"Deny","NotPrincipal":{"AWS":"*"},"Action":"s3:*","Resource":"*"}]}"#,
        )
        .unwrap();
        let spec = p.statements[0].principal.as_ref().unwrap();
        assert!(spec.any && spec.negated);
    }
}
