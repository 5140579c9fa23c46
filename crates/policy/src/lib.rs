//! AWS IAM policy documents for Quarry: identity policies (attached to users, groups, service
//! accounts and sessions) and resource policies (bucket policies), in AWS's JSON grammar.
//!
//! What it does:
//! - [`Policy::parse_identity`] / [`Policy::parse_resource`] read a document: `Version`, `Id`,
//!   `Statement` (one object or an array) with `Sid`, `Effect`, `Action` / `NotAction`, `Resource`
//!   / `NotResource`, `Principal` / `NotPrincipal` (resource policies only) and `Condition`. A bad
//!   document is a [`PolicyError::Malformed`] that names the statement and the field.
//! - [`evaluate`] decides a [`Request`] (action, resource ARN, principal, condition context) as
//!   AWS does for one account: an explicit `Deny` in any policy wins; otherwise an `Allow` from an
//!   identity policy or from a resource policy whose principal matches allows; otherwise the
//!   request is implicitly denied.
//! - Wildcards (`*`, `?`) in actions (case-insensitive), resources and `...Like` conditions;
//!   policy variables (`${aws:username}`, any context key, `${key, 'default'}`, and the escapes
//!   `${*}`, `${?}`, `${$}`) in resources and string/ARN condition values of `2012-10-17`
//!   documents; the condition operators of [`condition::Operator`] with `...IfExists` and the
//!   `ForAllValues:` / `ForAnyValue:` qualifiers.
//!
//! What it does not: know which actions or condition keys a service has (the S3 front end maps
//! its endpoints to actions and fills the context), store policies, or talk to anything.

pub mod condition;
mod error;
mod eval;
mod parse;
mod pattern;

pub use error::PolicyError;
pub use eval::{evaluate, Context, Decision, Principal, Request};
pub use parse::{Effect, Policy, PolicyKind, PrincipalSpec, Statement, StringSet, Version};
pub use pattern::{glob_match, Pattern};
