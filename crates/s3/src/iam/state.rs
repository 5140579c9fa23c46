//! The IAM state as stored: one JSON document (format 1) in the system configuration namespace,
//! its secrets sealed with ChaCha20-Poly1305 under a key derived from the root credentials; and
//! the [`Snapshot`] every request reads, built from it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hmac::{Hmac, Mac};
use quarry_policy::Policy;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::signature::Credentials;

/// The stored format this build writes and reads.
pub const IAM_FORMAT: u32 = 1;

/// The account every identity belongs to (Quarry has one), as it appears in ARNs.
pub const ACCOUNT_ID: &str = "000000000000";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IamState {
    pub format: u32,
    #[serde(default)]
    pub users: BTreeMap<String, User>,
    #[serde(default)]
    pub groups: BTreeMap<String, Group>,
    /// Managed policies by name.
    #[serde(default)]
    pub policies: BTreeMap<String, ManagedPolicy>,
    /// Access keys of users and service accounts.
    #[serde(default)]
    pub keys: BTreeMap<String, AccessKey>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// A stable id (`AIDA...`), as IAM's UserId.
    pub id: String,
    /// RFC 3339.
    pub created: String,
    pub enabled: bool,
    /// Inline policies by name: the documents as given.
    #[serde(default)]
    pub inline: BTreeMap<String, String>,
    /// Attached managed policies by name.
    #[serde(default)]
    pub attached: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub id: String,
    pub created: String,
    #[serde(default)]
    pub members: BTreeSet<String>,
    #[serde(default)]
    pub inline: BTreeMap<String, String>,
    #[serde(default)]
    pub attached: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagedPolicy {
    pub id: String,
    pub created: String,
    pub document: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyOwner {
    /// One of a user's own access keys.
    User(String),
    /// A service account: keys of their own, acting as `parent` (a user), narrowed by `policy`
    /// when given, until `expires` (RFC 3339) when given.
    ServiceAccount {
        parent: String,
        policy: Option<String>,
        expires: Option<String>,
        #[serde(default)]
        name: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessKey {
    pub owner: KeyOwner,
    /// base64(nonce (12 B) | ciphertext | tag), the access key as associated data.
    pub sealed_secret: String,
    pub active: bool,
    pub created: String,
}

/// Seals and opens secrets: ChaCha20-Poly1305 under HMAC-SHA256(root secret, a label and the
/// root access key), the same key on every node of the deployment.
#[derive(Clone)]
pub struct SecretBox {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(<key>)")
    }
}

impl SecretBox {
    pub fn from_root(root: &Credentials) -> SecretBox {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(root.secret_key.as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(b"quarry iam secrets v1\0");
        mac.update(root.access_key.as_bytes());
        let key = mac.finalize().into_bytes();
        SecretBox {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    pub fn seal(&self, access_key: &str, secret: &str) -> String {
        use base64::Engine as _;
        let nonce: [u8; 12] = rand::random();
        let ct = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: secret.as_bytes(),
                    aad: access_key.as_bytes(),
                },
            )
            .expect("ChaCha20-Poly1305 encrypts any message under 256 GiB");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        base64::engine::general_purpose::STANDARD.encode(out)
    }

    /// `None` when the value was sealed under other root credentials, for another key, or
    /// was altered.
    pub fn open(&self, access_key: &str, sealed: &str) -> Option<String> {
        use base64::Engine as _;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .ok()?;
        if raw.len() < 12 + 16 {
            return None;
        }
        let (nonce, ct) = raw.split_at(12);
        let pt = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: access_key.as_bytes(),
                },
            )
            .ok()?;
        String::from_utf8(pt).ok()
    }
}

impl IamState {
    pub fn decode(bytes: &[u8]) -> Result<IamState, String> {
        let state: IamState = serde_json::from_slice(bytes)
            .map_err(|e| format!("the IAM state is not valid: {e}"))?;
        if state.format != IAM_FORMAT {
            return Err(format!(
                "the IAM state has format {}, this build reads format {IAM_FORMAT}",
                state.format
            ));
        }
        Ok(state)
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("the IAM state serializes")
    }
}

/// What a request needs to know about an identity: its name and ARN and the identity policies
/// that apply to it (its own, its groups', and for a service account its narrowing policy).
#[derive(Debug, Clone)]
pub struct Identity {
    pub user: String,
    pub user_id: String,
    pub arn: String,
    pub access_key: String,
    /// The user's policies: inline, attached, and its groups' inline and attached.
    pub policies: Vec<Arc<Policy>>,
    /// A service account's own policy and a session's policy: the request must also be
    /// allowed by each.
    pub narrowing: Vec<Arc<Policy>>,
    pub service_account: bool,
}

/// An active key and the identity it signs for.
#[derive(Debug, Clone)]
pub struct KeyEntry {
    pub secret: String,
    pub identity: Arc<Identity>,
    /// Nanoseconds since the epoch after which the key is refused (service accounts).
    pub expires_ns: Option<i128>,
}

/// The IAM state as every request reads it: parsed policies, opened secrets, per key.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub keys: HashMap<String, KeyEntry>,
    pub state: IamState,
}

pub fn user_arn(name: &str) -> String {
    format!("arn:aws:iam::{ACCOUNT_ID}:user/{name}")
}

pub fn group_arn(name: &str) -> String {
    format!("arn:aws:iam::{ACCOUNT_ID}:group/{name}")
}

pub fn policy_arn(name: &str) -> String {
    format!("arn:aws:iam::{ACCOUNT_ID}:policy/{name}")
}

pub fn parse_time_ns(rfc3339: &str) -> Option<i128> {
    time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp_nanos())
}

impl Snapshot {
    /// Builds the snapshot. Keys whose secret does not open (other root credentials) or whose
    /// user is gone or disabled are left out, as are documents that no longer parse (each said
    /// in the log once per build).
    pub fn build(state: IamState, secrets: &SecretBox) -> Snapshot {
        let parse = |doc: &str, what: &str| -> Option<Arc<Policy>> {
            match Policy::parse_identity(doc) {
                Ok(p) => Some(Arc::new(p)),
                Err(e) => {
                    tracing::warn!("IAM: {what} is ignored: {e}");
                    None
                }
            }
        };
        let managed: HashMap<&str, Arc<Policy>> = state
            .policies
            .iter()
            .filter_map(|(name, p)| {
                Some((
                    name.as_str(),
                    parse(&p.document, &format!("policy {name}"))?,
                ))
            })
            .collect();
        let mut user_policies: HashMap<&str, Vec<Arc<Policy>>> = HashMap::new();
        for (name, user) in &state.users {
            let mut ps: Vec<Arc<Policy>> = user
                .inline
                .iter()
                .filter_map(|(pn, doc)| parse(doc, &format!("inline policy {pn} of user {name}")))
                .collect();
            ps.extend(
                user.attached
                    .iter()
                    .filter_map(|p| managed.get(p.as_str()).cloned()),
            );
            user_policies.insert(name, ps);
        }
        for (gname, group) in &state.groups {
            let mut gps: Vec<Arc<Policy>> = group
                .inline
                .iter()
                .filter_map(|(pn, doc)| parse(doc, &format!("inline policy {pn} of group {gname}")))
                .collect();
            gps.extend(
                group
                    .attached
                    .iter()
                    .filter_map(|p| managed.get(p.as_str()).cloned()),
            );
            for m in &group.members {
                if let Some(ps) = user_policies.get_mut(m.as_str()) {
                    ps.extend(gps.iter().cloned());
                }
            }
        }
        let mut keys = HashMap::new();
        for (ak, key) in &state.keys {
            if !key.active {
                continue;
            }
            let (user, narrowing, expires, service_account) = match &key.owner {
                KeyOwner::User(u) => (u, Vec::new(), None, false),
                KeyOwner::ServiceAccount {
                    parent,
                    policy,
                    expires,
                    ..
                } => {
                    let narrowing = match policy {
                        None => Vec::new(),
                        // A narrowing policy that does not parse narrows to nothing.
                        Some(doc) => match parse(doc, &format!("policy of service account {ak}")) {
                            Some(p) => vec![p],
                            None => continue,
                        },
                    };
                    let expires = match expires {
                        None => None,
                        Some(t) => match parse_time_ns(t) {
                            Some(ns) => Some(ns),
                            None => continue,
                        },
                    };
                    (parent, narrowing, expires, true)
                }
            };
            let Some(u) = state.users.get(user).filter(|u| u.enabled) else {
                continue;
            };
            let Some(secret) = secrets.open(ak, &key.sealed_secret) else {
                tracing::warn!(
                    access_key = %ak,
                    "IAM: the secret of this access key does not open with the root credentials' key (were the root credentials changed?); the key is refused"
                );
                continue;
            };
            keys.insert(
                ak.clone(),
                KeyEntry {
                    secret,
                    expires_ns: expires,
                    identity: Arc::new(Identity {
                        user: user.clone(),
                        user_id: u.id.clone(),
                        arn: user_arn(user),
                        access_key: ak.clone(),
                        policies: user_policies
                            .get(user.as_str())
                            .cloned()
                            .unwrap_or_default(),
                        narrowing,
                        service_account,
                    }),
                },
            );
        }
        Snapshot { keys, state }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_open_only_with_the_same_root_and_key() {
        let b = SecretBox::from_root(&Credentials::new("root", "root-secret-1"));
        let sealed = b.seal("AKUSER", "user-secret");
        assert!(!sealed.contains("user-secret"));
        assert_eq!(b.open("AKUSER", &sealed).as_deref(), Some("user-secret"));
        assert_eq!(b.open("AKOTHER", &sealed), None);
        let other = SecretBox::from_root(&Credentials::new("root", "root-secret-2"));
        assert_eq!(other.open("AKUSER", &sealed), None);
        assert_eq!(b.open("AKUSER", "bm90IHNlYWxlZA=="), None);
        assert_ne!(
            b.seal("AKUSER", "user-secret"),
            sealed,
            "a fresh nonce each time"
        );
    }

    #[test]
    fn format_is_checked() {
        let s = IamState {
            format: IAM_FORMAT,
            ..IamState::default()
        };
        assert_eq!(IamState::decode(&s.encode()).unwrap(), s);
        let e = IamState::decode(br#"{"format":2}"#).unwrap_err();
        assert!(e.contains("format 2"), "{e}");
        assert!(IamState::decode(b"nope").is_err());
    }
}
