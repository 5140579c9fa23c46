//! Identities: users, groups, managed and inline policies, service accounts; their state on the
//! drives; and the IAM and STS query APIs (`query`).
//!
//! State: one document ([`state::IamState`]) in the deployment's system configuration namespace
//! (`ObjectLayer::get_system_config("iam")`: a read/write quorum of the first erasure set, like a
//! bucket's configuration). Secrets are sealed under a key derived from the root credentials.
//!
//! Every node keeps a [`state::Snapshot`] in memory, which signature verification
//! ([`crate::signature::KeyStore`]) and authorization read without waiting. A change is written
//! to a quorum and installed in the changing node's snapshot before the call answers (so a key
//! disabled or deleted there is refused at once); every other node polls the document every
//! [`POLL_INTERVAL`] and installs it when its bytes changed, so a change is visible cluster-wide
//! within about half a second plus one quorum read.
//!
//! Concurrent changes through different nodes are serialized per node only: each change reads
//! the stored document fresh, applies itself and writes it back, so two changes made at the
//! same moment on two nodes can lose one of them (the last write wins).

pub mod admin;
pub mod query;
pub mod state;
pub mod sts;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use quarry_object::ObjectLayer;

use crate::signature::{Credentials, KeyStore};
use state::{IamState, Identity, SecretBox, Snapshot, IAM_FORMAT};

/// The name of the IAM document in the system configuration namespace.
pub const CONFIG_NAME: &str = "iam";

/// How often a node reads the stored document to pick up changes made through other nodes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Why an IAM change or read failed; each maps to the IAM error code a client expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IamError {
    #[error("{0}")]
    NoSuchEntity(String),
    #[error("{0}")]
    EntityAlreadyExists(String),
    #[error("{0}")]
    MalformedPolicyDocument(String),
    #[error("{0}")]
    InvalidInput(String),
    /// The caller may not make this call.
    #[error("{0}")]
    AccessDenied(String),
    /// A parameter out of its range (STS's name for it).
    #[error("{0}")]
    Validation(String),
    #[error("{0}")]
    DeleteConflict(String),
    #[error("{0}")]
    LimitExceeded(String),
    /// An action this server does not answer.
    #[error("{0}")]
    InvalidAction(String),
    /// The drives could not be read or written (quorum, a full disk, ...).
    #[error("the IAM state could not be stored or read: {0}")]
    Storage(String),
    /// The stored document is of an unknown format or damaged.
    #[error("{0}")]
    Corrupt(String),
}

impl IamError {
    /// The IAM error code and HTTP status.
    pub fn code(&self) -> (&'static str, u16) {
        match self {
            IamError::NoSuchEntity(_) => ("NoSuchEntity", 404),
            IamError::EntityAlreadyExists(_) => ("EntityAlreadyExists", 409),
            IamError::MalformedPolicyDocument(_) => ("MalformedPolicyDocument", 400),
            IamError::InvalidInput(_) => ("InvalidInput", 400),
            IamError::Validation(_) => ("ValidationError", 400),
            IamError::AccessDenied(_) => ("AccessDenied", 403),
            IamError::DeleteConflict(_) => ("DeleteConflict", 409),
            IamError::LimitExceeded(_) => ("LimitExceeded", 409),
            IamError::InvalidAction(_) => ("InvalidAction", 400),
            IamError::Storage(_) => ("ServiceFailure", 503),
            IamError::Corrupt(_) => ("ServiceFailure", 500),
        }
    }
}

/// The IAM store of one node.
pub struct Iam {
    layer: Arc<dyn ObjectLayer>,
    secrets: SecretBox,
    snapshot: RwLock<Arc<Snapshot>>,
    /// The bytes the snapshot was built from (`None`: nothing stored yet).
    installed: std::sync::Mutex<Option<Bytes>>,
    loaded: AtomicBool,
    /// One change at a time on this node.
    writer: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Iam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iam")
            .field("keys", &self.snapshot().keys.len())
            .finish_non_exhaustive()
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

impl Iam {
    /// A store over `layer`, sealing secrets under `root`'s derived key. Empty until
    /// [`Iam::refresh`] has read the drives.
    pub fn new(layer: Arc<dyn ObjectLayer>, root: &Credentials) -> Arc<Iam> {
        Arc::new(Iam {
            layer,
            secrets: SecretBox::from_root(root),
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            installed: std::sync::Mutex::new(None),
            loaded: AtomicBool::new(false),
            writer: tokio::sync::Mutex::new(()),
        })
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        read(&self.snapshot).clone()
    }

    /// Whether the drives have been read once.
    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// The identity an access key signs for, if the key may sign now.
    pub fn identity(&self, access_key: &str) -> Option<Arc<Identity>> {
        let snap = self.snapshot();
        let entry = snap.keys.get(access_key)?;
        if expired(entry.expires_ns) {
            return None;
        }
        Some(entry.identity.clone())
    }

    /// Reads the stored document and installs it if it changed. A layer without a system
    /// namespace (some test layers) has no IAM: that is not an error.
    pub async fn refresh(&self) -> Result<(), IamError> {
        let stored = match self.layer.get_system_config(CONFIG_NAME).await {
            Ok(v) => v,
            Err(quarry_object::Error::NotImplemented(_)) => {
                self.loaded.store(true, Ordering::Release);
                return Ok(());
            }
            Err(e) => return Err(IamError::Storage(e.to_string())),
        };
        let unchanged = *self.installed.lock().unwrap_or_else(|e| e.into_inner()) == stored;
        if !unchanged || !self.loaded() {
            let state = match &stored {
                None => fresh_state(),
                Some(bytes) => IamState::decode(bytes).map_err(IamError::Corrupt)?,
            };
            self.install(state, stored);
        }
        self.loaded.store(true, Ordering::Release);
        Ok(())
    }

    fn install(&self, state: IamState, bytes: Option<Bytes>) {
        let snap = Arc::new(Snapshot::build(state, &self.secrets));
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = snap;
        *self.installed.lock().unwrap_or_else(|e| e.into_inner()) = bytes;
    }

    /// Applies `change` to the stored state (read fresh from the drives), writes it back to a
    /// quorum and installs it on this node before returning `change`'s result.
    pub async fn update<T>(
        &self,
        change: impl FnOnce(&mut IamState, &SecretBox) -> Result<T, IamError>,
    ) -> Result<T, IamError> {
        let _one = self.writer.lock().await;
        let stored = self
            .layer
            .get_system_config(CONFIG_NAME)
            .await
            .map_err(|e| IamError::Storage(e.to_string()))?;
        let mut state = match &stored {
            None => fresh_state(),
            Some(bytes) => IamState::decode(bytes).map_err(IamError::Corrupt)?,
        };
        let out = change(&mut state, &self.secrets)?;
        let bytes = Bytes::from(state.encode());
        self.layer
            .put_system_config(CONFIG_NAME, bytes.clone())
            .await
            .map_err(|e| IamError::Storage(e.to_string()))?;
        self.install(state, Some(bytes));
        self.loaded.store(true, Ordering::Release);
        Ok(out)
    }

    /// Polls the drives every [`POLL_INTERVAL`] while the store is in use (the task ends when
    /// the last other reference to it is dropped).
    pub fn spawn_poller(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                let Some(iam) = weak.upgrade() else { return };
                match iam.refresh().await {
                    Ok(()) if failing => {
                        tracing::info!("IAM state readable again");
                        failing = false;
                    }
                    Ok(()) => {}
                    Err(e) if !failing => {
                        tracing::warn!(error = %e, "IAM state could not be read; keeping the last one");
                        failing = true;
                    }
                    Err(_) => {}
                }
                drop(iam);
                tokio::time::sleep(POLL_INTERVAL).await;
            }
        });
    }
}

fn fresh_state() -> IamState {
    IamState {
        format: IAM_FORMAT,
        ..IamState::default()
    }
}

fn expired(expires_ns: Option<i128>) -> bool {
    expires_ns.is_some_and(|ns| {
        let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
        now >= ns
    })
}

impl KeyStore for Iam {
    fn lookup(&self, access_key: &str) -> Option<Credentials> {
        let snap = self.snapshot();
        let entry = snap.keys.get(access_key)?;
        if expired(entry.expires_ns) {
            return None;
        }
        Some(Credentials::new(access_key, entry.secret.clone()))
    }
}
