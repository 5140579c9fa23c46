//! Why a policy document was refused.

/// A policy document that cannot be used. Its `Display` is the message a user sees in the
/// `MalformedPolicy` error: it names the statement (by position, and `Sid` when it has one) and
/// the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Not JSON at all, or not a JSON object.
    #[error("the policy is not a valid JSON document: {0}")]
    Json(String),
    /// A field of the document, or of one statement, is missing, unknown or has a bad value.
    #[error("{}{field}: {reason}", place(*statement, sid.as_deref()))]
    Malformed {
        /// The statement's position (1-based), if the problem is inside one.
        statement: Option<usize>,
        /// The statement's `Sid`, if it has one.
        sid: Option<String>,
        /// The field (`Action`, `Condition.StringLike.s3:prefix`, ...).
        field: String,
        reason: String,
    },
}

fn place(statement: Option<usize>, sid: Option<&str>) -> String {
    match (statement, sid) {
        (Some(n), Some(sid)) => format!("Statement {n} (Sid {sid:?}): "),
        (Some(n), None) => format!("Statement {n}: "),
        (None, _) => String::new(),
    }
}
