//! Deciding a request: the request context and AWS's evaluation logic for one account.

use crate::parse::{Effect, Policy, PrincipalSpec, Statement, StringSet};

/// The condition context of a request: condition keys (`aws:SourceIp`, `s3:prefix`, ...) and
/// their values. Key names are case-insensitive, values are not. A key may hold several values
/// (`ForAllValues:` / `ForAnyValue:` look at all of them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    entries: Vec<(String, Vec<String>)>,
}

impl Context {
    /// Adds `value` to `key`'s values.
    pub fn insert(&mut self, key: &str, value: impl Into<String>) {
        let value = value.into();
        match self
            .entries
            .iter_mut()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
        {
            Some((_, values)) => {
                if !values.contains(&value) {
                    values.push(value)
                }
            }
            None => self.entries.push((key.to_ascii_lowercase(), vec![value])),
        }
    }

    /// Replaces `key`'s values with `value`.
    pub fn set(&mut self, key: &str, value: impl Into<String>) {
        self.entries.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
        self.entries
            .push((key.to_ascii_lowercase(), vec![value.into()]));
    }

    /// `key`'s values, or `None` when the request has no such key.
    pub fn get(&self, key: &str) -> Option<&[String]> {
        self.entries
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_slice())
    }

    /// [`Context::get`] for a key already in ASCII lower case (keys are stored so): an exact
    /// comparison, for the keys a compiled policy looks up on every request.
    pub(crate) fn get_lowercase(&self, key: &str) -> Option<&[String]> {
        debug_assert!(!key.bytes().any(|b| b.is_ascii_uppercase()));
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    }
}

/// Who makes a request, as a resource policy's `Principal` names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Principal {
    /// An unsigned request. Only `Principal: "*"` (or `{"AWS": "*"}`) matches it.
    pub anonymous: bool,
    /// The names a `Principal` element may use for this caller: its ARN
    /// (`arn:aws:iam::<account>:user/<name>`), its account (`<account>`,
    /// `arn:aws:iam::<account>:root`) when the account's policies may speak for it, a canonical
    /// user id. Compared exactly.
    pub ids: Vec<String>,
}

/// One request to decide.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `s3:GetObject`, `iam:CreateUser`, ...
    pub action: &'a str,
    /// The resource's ARN (`arn:aws:s3:::bucket/key`), or `*` for actions on no resource.
    pub resource: &'a str,
    pub principal: &'a Principal,
    pub context: &'a Context,
}

/// The outcome of [`evaluate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Some statement allows the request and none denies it.
    Allow,
    /// A statement denies it: nothing else can allow it.
    ExplicitDeny,
    /// No statement applies: denied by default.
    ImplicitDeny,
}

impl Decision {
    pub fn is_allowed(self) -> bool {
        self == Decision::Allow
    }
}

/// Decides `req` as AWS does within one account: an explicit `Deny` in any identity or resource
/// policy wins; otherwise an `Allow` in any identity policy, or in a resource policy whose
/// `Principal` matches the caller, allows; otherwise the request is implicitly denied.
///
/// Identity policies apply to their caller whatever it is; resource policies only through their
/// `Principal` / `NotPrincipal`.
pub fn evaluate(identity: &[&Policy], resource: &[&Policy], req: &Request<'_>) -> Decision {
    let mut allowed = false;
    for (policies, check_principal) in [(identity, false), (resource, true)] {
        for policy in policies {
            for st in &policy.statements {
                // An allow changes nothing once one was found: only denies can still matter.
                if allowed && st.effect == Effect::Allow {
                    continue;
                }
                if statement_applies(st, req, check_principal) {
                    match st.effect {
                        Effect::Deny => return Decision::ExplicitDeny,
                        Effect::Allow => allowed = true,
                    }
                }
            }
        }
    }
    if allowed {
        Decision::Allow
    } else {
        Decision::ImplicitDeny
    }
}

/// Whether a statement applies to the request (its effect then decides).
pub(crate) fn statement_applies(st: &Statement, req: &Request<'_>, check_principal: bool) -> bool {
    if check_principal {
        match &st.principal {
            Some(p) if principal_matches(p, req.principal) => {}
            _ => return false,
        }
    }
    set_matches(&st.action, req.action, req.context, true)
        && st
            .resource
            .as_ref()
            .is_none_or(|r| set_matches(r, req.resource, req.context, false))
        && st.conditions.iter().all(|c| c.holds(req.context))
}

fn set_matches(set: &StringSet, text: &str, ctx: &Context, ignore_case: bool) -> bool {
    let any = set
        .patterns
        .iter()
        .any(|p| p.matches(text, ctx, ignore_case));
    any != set.negated
}

fn principal_matches(spec: &PrincipalSpec, who: &Principal) -> bool {
    let listed =
        spec.any || (!who.anonymous && spec.ids.iter().any(|id| who.ids.iter().any(|w| w == id)));
    listed != spec.negated
}
