//! Temporary credentials (STS `AssumeRole`, `GetSessionToken`), in MinIO's model: a session acts as the user whose
//! key asked for it, with that user's permissions, narrowed by the session policy when one was
//! given. There are no IAM roles: `RoleArn` is accepted and not looked up.
//!
//! Stateless: nothing is stored. The session token is the session itself
//! (format 1: `{v, ak, sk, parent, exp, policy}` as JSON), sealed with ChaCha20-Poly1305 under
//! the key the IAM secrets are sealed with (derived from the root credentials), so any node of
//! the deployment opens it and nobody else can read the secret in it or forge one. At every
//! request the token is opened, its expiry checked, and the identity of the parent access key
//! looked up in the current IAM snapshot: a session of a user deleted or disabled, or of a key
//! deleted, made inactive or expired since, is refused at once.

use std::sync::Arc;

use quarry_policy::Policy;
use serde::{Deserialize, Serialize};

use super::state::{Identity, SecretBox};
use super::{Iam, IamError};
use crate::signature::Credentials;

/// The format of the sealed claims this build writes and reads.
const SESSION_FORMAT: u32 = 1;
/// Associated data of a sealed session: a sealed IAM secret never opens as a session.
const SESSION_AAD: &str = "quarry sts session v1";
/// Access keys of temporary credentials start with this.
pub const SESSION_KEY_PREFIX: &str = "QSTS";
/// AWS's bounds and default for `DurationSeconds`.
pub const MIN_DURATION: u64 = 900;
pub const MAX_DURATION: u64 = 43_200;
pub const DEFAULT_DURATION: u64 = 3_600;
/// AWS's bounds and default for `GetSessionToken`'s `DurationSeconds` (an IAM user's).
pub const MAX_TOKEN_DURATION: u64 = 129_600;
pub const DEFAULT_TOKEN_DURATION: u64 = 43_200;
/// The largest session policy (AWS's packed limit is smaller; the document is carried in the
/// token, which travels in every request's headers).
pub const MAX_SESSION_POLICY: usize = 2_048;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Claims {
    v: u32,
    ak: String,
    sk: String,
    /// The access key that asked for the session.
    parent: String,
    /// Unix seconds after which the session is refused.
    exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
}

/// New temporary credentials.
#[derive(Clone)]
pub struct Session {
    pub access_key: String,
    pub secret_key: String,
    pub token: String,
    /// Unix seconds.
    pub expires: i64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("access_key", &self.access_key)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// Why a session token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("The provided token is malformed or otherwise invalid.")]
    Malformed,
    #[error("The provided token has expired.")]
    Expired,
    #[error("The provided token is no longer valid: the key that requested it was deleted or made inactive, or its user was deleted or disabled.")]
    Revoked,
}

fn now_s() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Checks a session policy and returns it parsed.
pub fn check_session_policy(doc: &str) -> Result<Policy, IamError> {
    if doc.len() > MAX_SESSION_POLICY {
        return Err(IamError::Validation(format!(
            "The session policy is {} bytes; at most {MAX_SESSION_POLICY} are accepted.",
            doc.len()
        )));
    }
    Policy::parse_submitted_identity(doc)
        .map_err(|e| IamError::MalformedPolicyDocument(e.to_string()))
}

fn seal(secrets: &SecretBox, claims: &Claims) -> String {
    let json = serde_json::to_string(claims).expect("session claims serialize");
    secrets.seal(SESSION_AAD, &json)
}

fn open(secrets: &SecretBox, token: &str) -> Result<Claims, SessionError> {
    let json = secrets
        .open(SESSION_AAD, token)
        .ok_or(SessionError::Malformed)?;
    let claims: Claims = serde_json::from_str(&json).map_err(|_| SessionError::Malformed)?;
    if claims.v != SESSION_FORMAT {
        return Err(SessionError::Malformed);
    }
    Ok(claims)
}

impl Iam {
    /// Issues temporary credentials for `parent` (an IAM access key) lasting `duration_s`,
    /// narrowed by `policy` when given (already checked).
    pub fn issue_session(&self, parent: &str, duration_s: u64, policy: Option<String>) -> Session {
        let (random_ak, secret) = super::query::new_key_pair();
        let access_key = format!(
            "{SESSION_KEY_PREFIX}{}",
            &random_ak[random_ak.len().saturating_sub(16)..]
        );
        let expires = now_s() + duration_s as i64;
        let claims = Claims {
            v: SESSION_FORMAT,
            ak: access_key.clone(),
            sk: secret.clone(),
            parent: parent.to_owned(),
            exp: expires,
            policy,
        };
        Session {
            token: seal(&self.secrets, &claims),
            access_key,
            secret_key: secret,
            expires,
        }
    }

    /// Opens a session token: the credentials the request must be signed with and the
    /// identity it acts as.
    pub fn session(&self, token: &str) -> Result<(Credentials, Arc<Identity>), SessionError> {
        let claims = open(&self.secrets, token)?;
        if now_s() >= claims.exp {
            return Err(SessionError::Expired);
        }
        let parent = self.identity(&claims.parent).ok_or(SessionError::Revoked)?;
        let mut id = (*parent).clone();
        id.access_key = claims.ak.clone();
        if let Some(doc) = &claims.policy {
            // Checked when issued; a document this build no longer parses narrows to nothing.
            let p = Policy::parse_identity(doc).map_err(|_| SessionError::Malformed)?;
            id.narrowing.push(Arc::new(p));
        }
        Ok((Credentials::new(claims.ak, claims.sk), Arc::new(id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: i64) -> Claims {
        Claims {
            v: SESSION_FORMAT,
            ak: "QSTSAAAA".into(),
            sk: "session-secret".into(),
            parent: "QKIAPARENT".into(),
            exp,
            policy: None,
        }
    }

    #[test]
    fn tokens_open_only_under_the_same_root_and_hide_the_secret() {
        let b = SecretBox::from_root(&Credentials::new("root", "root-secret-1"));
        let c = claims(now_s() + 60);
        let token = seal(&b, &c);
        assert!(!token.contains("session-secret"));
        assert_eq!(open(&b, &token).unwrap(), c);
        let other = SecretBox::from_root(&Credentials::new("root", "root-secret-2"));
        assert_eq!(open(&other, &token), Err(SessionError::Malformed));
        assert_eq!(open(&b, "bm90IGEgdG9rZW4="), Err(SessionError::Malformed));
        // A sealed IAM secret (other associated data) is not a token.
        assert_eq!(
            open(&b, &b.seal("QSTSAAAA", "x")),
            Err(SessionError::Malformed)
        );
        let mut tampered = token.into_bytes();
        let i = tampered.len() / 2;
        tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            open(&b, &String::from_utf8(tampered).unwrap()),
            Err(SessionError::Malformed)
        );
    }

    #[test]
    fn session_policies_are_checked() {
        let ok = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}]}"#;
        assert!(check_session_policy(ok).is_ok());
        assert!(matches!(
            check_session_policy("{"),
            Err(IamError::MalformedPolicyDocument(_))
        ));
        let big = format!("{ok:<3000}");
        assert!(matches!(
            check_session_policy(&big),
            Err(IamError::Validation(_))
        ));
    }
}
