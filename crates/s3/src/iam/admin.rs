//! The identity calls of the admin API (`/quarry/admin/v1/`, root only, JSON answers) that the
//! IAM query API has no call for: enabling and disabling a user, and service accounts.
//!
//! A service account is an access key bound to a parent user: it acts as that user, narrowed by
//! its own policy when it has one (a request must be allowed by both: the intersection), until
//! its expiry when it has one. It is stored beside the users' keys (`KeyOwner::ServiceAccount`
//! in the IAM document, format 1 unchanged) and is not listed by `ListAccessKeys`.

use serde::Serialize;

use super::query::new_key_pair;
use super::state::{parse_time_ns, AccessKey, KeyOwner};
use super::{Iam, IamError};

/// A user's state after `users/enable` or `users/disable`.
#[derive(Debug, Serialize)]
pub struct UserStatusJson {
    pub user: String,
    pub enabled: bool,
}

/// One service account; `secret_key` only in the answer that created it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountJson {
    pub access_key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_key: Option<String>,
    pub parent: String,
    pub name: Option<String>,
    pub expires: Option<String>,
    pub created: String,
    pub active: bool,
    /// The narrowing policy (in `info` and the creating answer; `list` says only whether).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    pub has_policy: bool,
}

fn json_of(ak: &str, key: &AccessKey, with_policy: bool) -> Option<ServiceAccountJson> {
    let KeyOwner::ServiceAccount {
        parent,
        policy,
        expires,
        name,
    } = &key.owner
    else {
        return None;
    };
    Some(ServiceAccountJson {
        access_key: ak.to_owned(),
        secret_key: None,
        parent: parent.clone(),
        name: name.clone(),
        expires: expires.clone(),
        created: key.created.clone(),
        active: key.active,
        policy: policy.clone().filter(|_| with_policy),
        has_policy: policy.is_some(),
    })
}

fn no_account(ak: &str) -> IamError {
    IamError::NoSuchEntity(format!("The service account {ak} cannot be found."))
}

impl Iam {
    /// Enables or disables a user: a disabled user's keys, service accounts and sessions are
    /// refused from the next request on.
    pub async fn set_user_enabled(
        &self,
        user: &str,
        enabled: bool,
    ) -> Result<UserStatusJson, IamError> {
        let user = user.to_owned();
        self.update(move |s, _| {
            let u = s.users.get_mut(&user).ok_or_else(|| {
                IamError::NoSuchEntity(format!("The user with name {user} cannot be found."))
            })?;
            u.enabled = enabled;
            Ok(UserStatusJson { user, enabled })
        })
        .await
    }

    /// Creates a service account of `parent`, narrowed by `policy`, until `expires` (RFC 3339).
    pub async fn add_service_account(
        &self,
        parent: &str,
        name: Option<String>,
        policy: Option<String>,
        expires: Option<String>,
    ) -> Result<ServiceAccountJson, IamError> {
        if let Some(doc) = &policy {
            super::query::check_document(doc)?;
        }
        if let Some(t) = &expires {
            let ns = parse_time_ns(t).ok_or_else(|| {
                IamError::InvalidInput(format!(
                    "expires {t:?} is not an RFC 3339 time (2030-01-31T12:00:00Z)."
                ))
            })?;
            if ns <= time::OffsetDateTime::now_utc().unix_timestamp_nanos() {
                return Err(IamError::InvalidInput(format!(
                    "expires {t:?} is in the past."
                )));
            }
        }
        let parent = parent.to_owned();
        self.update(move |s, secrets| {
            if !s.users.contains_key(&parent) {
                return Err(IamError::NoSuchEntity(format!(
                    "The user with name {parent} cannot be found."
                )));
            }
            let (ak, secret) = new_key_pair();
            let key = AccessKey {
                owner: KeyOwner::ServiceAccount {
                    parent,
                    policy,
                    expires,
                    name,
                },
                sealed_secret: secrets.seal(&ak, &secret),
                active: true,
                created: super::query::now(),
            };
            let mut out = json_of(&ak, &key, true).expect("a service account");
            out.secret_key = Some(secret);
            s.keys.insert(ak, key);
            Ok(out)
        })
        .await
    }

    /// The service accounts (of `parent` when given), without their policies.
    pub fn service_accounts(&self, parent: Option<&str>) -> Vec<ServiceAccountJson> {
        let snap = self.snapshot();
        snap.state
            .keys
            .iter()
            .filter_map(|(ak, k)| json_of(ak, k, false))
            .filter(|j| parent.is_none_or(|p| j.parent == p))
            .collect()
    }

    pub fn service_account(&self, ak: &str) -> Result<ServiceAccountJson, IamError> {
        let snap = self.snapshot();
        snap.state
            .keys
            .get(ak)
            .and_then(|k| json_of(ak, k, true))
            .ok_or_else(|| no_account(ak))
    }

    pub async fn remove_service_account(&self, ak: &str) -> Result<(), IamError> {
        let ak = ak.to_owned();
        self.update(move |s, _| {
            let is_account = s
                .keys
                .get(&ak)
                .is_some_and(|k| matches!(k.owner, KeyOwner::ServiceAccount { .. }));
            if !is_account {
                return Err(no_account(&ak));
            }
            s.keys.remove(&ak);
            Ok(())
        })
        .await
    }
}
