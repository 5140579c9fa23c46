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
    /// What the snapshot was built from.
    installed: std::sync::Mutex<Installed>,
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

/// The document the snapshot was built from, and how many times one was installed.
#[derive(Default)]
struct Installed {
    /// `None`: nothing stored yet.
    bytes: Option<Bytes>,
    /// Counts installs. A refresh installs what it read only if nothing was installed while it
    /// read: a change made on this node meanwhile is newer than the document the refresh read,
    /// which must not replace it.
    generation: u64,
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
            installed: std::sync::Mutex::new(Installed::default()),
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
    ///
    /// A change made through this node while the document was being read is kept: the document
    /// read may predate it (the poller's read racing an `update`), and installing it would undo
    /// the change here until the next poll.
    pub async fn refresh(&self) -> Result<(), IamError> {
        let generation = self.installed().generation;
        let stored = match self.layer.get_system_config(CONFIG_NAME).await {
            Ok(v) => v,
            Err(quarry_object::Error::NotImplemented(_)) => {
                self.loaded.store(true, Ordering::Release);
                return Ok(());
            }
            Err(e) => return Err(IamError::Storage(e.to_string())),
        };
        let mut installed = self.installed();
        if installed.generation != generation {
            return Ok(());
        }
        if installed.bytes != stored || !self.loaded() {
            let state = match &stored {
                None => fresh_state(),
                Some(bytes) => IamState::decode(bytes).map_err(IamError::Corrupt)?,
            };
            self.install(&mut installed, state, stored);
        }
        self.loaded.store(true, Ordering::Release);
        Ok(())
    }

    fn installed(&self) -> std::sync::MutexGuard<'_, Installed> {
        self.installed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs `state`, built from `bytes`; the caller holds `installed`.
    fn install(&self, installed: &mut Installed, state: IamState, bytes: Option<Bytes>) {
        let snap = Arc::new(Snapshot::build(state, &self.secrets));
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = snap;
        installed.bytes = bytes;
        installed.generation += 1;
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
        self.install(&mut self.installed(), state, Some(bytes));
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use quarry_object::{
        BucketInfo, ByteStream, Error, GetObjectReader, HttpRange, ListOptions, ListResult,
        ObjectInfo, PutOptions, Result,
    };
    use tokio::sync::oneshot;

    use super::*;

    /// A system namespace in memory whose next read, when held, answers what was stored when
    /// it began, but only once released: the poller's read overtaken by a change.
    #[derive(Default)]
    struct Held {
        stored: Mutex<Option<Bytes>>,
        hold: Mutex<Option<oneshot::Receiver<()>>>,
        /// Told when a held read has read (and now waits).
        reading: Mutex<Option<oneshot::Sender<()>>>,
    }

    fn none<T>() -> Result<T> {
        Err(Error::NotImplemented("test layer"))
    }

    #[async_trait]
    impl ObjectLayer for Held {
        async fn get_system_config(&self, _: &str) -> Result<Option<Bytes>> {
            let read = self.stored.lock().unwrap().clone();
            let hold = self.hold.lock().unwrap().take();
            if let Some(release) = hold {
                let _ = self.reading.lock().unwrap().take().unwrap().send(());
                let _ = release.await;
            }
            Ok(read)
        }
        async fn put_system_config(&self, _: &str, data: Bytes) -> Result<()> {
            *self.stored.lock().unwrap() = Some(data);
            Ok(())
        }
        async fn make_bucket(&self, _: &str) -> Result<()> {
            none()
        }
        async fn bucket_info(&self, _: &str) -> Result<BucketInfo> {
            none()
        }
        async fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
            none()
        }
        async fn delete_bucket(&self, _: &str) -> Result<()> {
            none()
        }
        async fn put_object(
            &self,
            _: &str,
            _: &str,
            _: ByteStream,
            _: PutOptions,
        ) -> Result<ObjectInfo> {
            none()
        }
        async fn get_object(
            &self,
            _: &str,
            _: &str,
            _: Option<HttpRange>,
        ) -> Result<GetObjectReader> {
            none()
        }
        async fn object_info(&self, _: &str, _: &str) -> Result<ObjectInfo> {
            none()
        }
        async fn delete_object(&self, _: &str, _: &str) -> Result<()> {
            none()
        }
        async fn list_objects(&self, _: &str, _: ListOptions) -> Result<ListResult> {
            none()
        }
        async fn get_bucket_config(&self, _: &str, _: &str) -> Result<Option<Bytes>> {
            none()
        }
        async fn put_bucket_config(&self, _: &str, _: &str, _: Bytes) -> Result<()> {
            none()
        }
        async fn delete_bucket_config(&self, _: &str, _: &str) -> Result<()> {
            none()
        }
    }

    async fn add_user(iam: &Iam, name: &str) {
        let name = name.to_owned();
        iam.update(|state, _| {
            let user = state::User {
                id: "AIDATEST".into(),
                created: "2026-12-07T00:00:00Z".into(),
                enabled: true,
                inline: Default::default(),
                attached: Default::default(),
            };
            state.users.insert(name, user);
            Ok(())
        })
        .await
        .unwrap()
    }

    fn users(iam: &Iam) -> Vec<String> {
        iam.snapshot().state.users.keys().cloned().collect()
    }

    /// A refresh that read the document before a change made through this node, and installs
    /// after it, must not undo the change (seen as a user's new group membership refused for up
    /// to a poll interval on the node that answered the change).
    #[tokio::test]
    async fn a_refresh_overtaken_by_a_change_keeps_the_change() {
        let layer = Arc::new(Held::default());
        let iam = Iam::new(layer.clone(), &Credentials::new("root", "root-secret"));
        add_user(&iam, "alice").await;
        assert_eq!(users(&iam), ["alice"]);

        let (release, held) = oneshot::channel();
        let (reading_tx, reading) = oneshot::channel();
        *layer.hold.lock().unwrap() = Some(held);
        *layer.reading.lock().unwrap() = Some(reading_tx);
        let poller = {
            let iam = iam.clone();
            tokio::spawn(async move { iam.refresh().await })
        };
        reading.await.unwrap();
        add_user(&iam, "bob").await;
        assert_eq!(users(&iam), ["alice", "bob"]);
        release.send(()).unwrap();
        poller.await.unwrap().unwrap();
        assert_eq!(
            users(&iam),
            ["alice", "bob"],
            "the older document was installed"
        );

        // Control: a refresh that nothing overtook installs what another node stored.
        let mut other = IamState::decode(layer.stored.lock().unwrap().as_ref().unwrap()).unwrap();
        other.users.remove("alice");
        *layer.stored.lock().unwrap() = Some(Bytes::from(other.encode()));
        iam.refresh().await.unwrap();
        assert_eq!(users(&iam), ["bob"]);
    }
}
