//! Drive replacement while the server runs: a node checks its own drives every
//! [`crate::ObjectConfig::drive_check_interval`], and a drive whose `format.json` has gone (an
//! operator swapped the disk, or emptied the directory) is formatted into its slot and healed in
//! the background, exactly as a blank drive found at start-up is ([`crate::drive_heal`]).
//!
//! Two guards keep a passing state from being taken for a replacement:
//! - the drive must be seen without a format on two checks in a row (a swap or a wipe in
//!   progress is left to finish);
//! - a drive whose root was a mount point when the watch began (its own filesystem) is formatted
//!   again only once a filesystem is mounted there: an unmounted disk leaves the bare mount-point
//!   directory, and healing a whole drive's worth of shards into the root filesystem is never
//!   what the operator meant. The log says why it waits.
//!
//! A drive that is healing already is left to its heal.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use quarry_disk::FormatV1;
use tracing::{info, warn};

use crate::server::ErasureServer;

/// One local drive under watch.
struct Watched {
    set: usize,
    position: usize,
    root: PathBuf,
    /// Its root was a mount point when the watch began.
    was_mount: bool,
    /// The last check found it without a format.
    blank_seen: bool,
    /// The log already said it waits for a filesystem to be mounted.
    said_unmounted: bool,
}

/// Whether `root` is a mount point: on another device than its parent directory.
fn is_mount_point(root: &Path) -> bool {
    let parent = root.parent().unwrap_or(Path::new("/"));
    match (std::fs::metadata(root), std::fs::metadata(parent)) {
        (Ok(r), Ok(p)) => r.dev() != p.dev(),
        _ => false,
    }
}

/// Starts the watch of the local drives `(set, position, root)` of `server`, every `every`;
/// it ends with the server.
pub(crate) fn spawn(
    server: &Arc<ErasureServer>,
    local: &[(usize, usize, PathBuf)],
    every: Duration,
) {
    let Some(set) = server.sets().first() else {
        return;
    };
    let runtime = set.cfg.runtime.clone();
    let mut watched: Vec<Watched> = local
        .iter()
        .map(|(s, p, root)| Watched {
            set: *s,
            position: *p,
            root: root.clone(),
            was_mount: is_mount_point(root),
            blank_seen: false,
            said_unmounted: false,
        })
        .collect();
    let server: Weak<ErasureServer> = Arc::downgrade(server);
    runtime.spawn(Box::pin(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(server) = server.upgrade() else {
                return;
            };
            for w in &mut watched {
                check(&server, w).await;
            }
        }
    }));
}

/// One check of one drive; formats it and starts its heal when it was replaced.
async fn check(server: &Arc<ErasureServer>, w: &mut Watched) {
    let Some(set) = server.sets().get(w.set) else {
        return;
    };
    let Some(drive) = set.drives.get(w.position) else {
        return;
    };
    if server.drive_heal_running(&w.root) {
        w.blank_seen = false;
        return;
    }
    // Only a drive that answers "no format" is a replacement; an error (a failing disk, a
    // permission) is for the operator and the drive's state, not something to format over.
    if !matches!(drive.read_format().await, Ok(None)) || !w.root.is_dir() {
        w.blank_seen = false;
        w.said_unmounted = false;
        return;
    }
    if w.was_mount && !is_mount_point(&w.root) {
        if !w.said_unmounted {
            warn!(drive = drive.endpoint(), "drive has no format and no filesystem is mounted at its root (it was a mount point): waiting for a disk to be mounted there before formatting it");
            w.said_unmounted = true;
        }
        w.blank_seen = false;
        return;
    }
    if !w.blank_seen {
        info!(
            drive = drive.endpoint(),
            "drive has no format: it is formatted into its slot if it still has none at the next check"
        );
        w.blank_seen = true;
        return;
    }
    w.blank_seen = false;
    let Some(reference) = reference_format(server, w).await else {
        warn!(
            drive = drive.endpoint(),
            "drive has no format, and no other drive of its set answered with the deployment's: not formatting it yet"
        );
        return;
    };
    let f = FormatV1::new(
        reference.deployment_id,
        reference.sets[w.set][w.position],
        reference.sets.clone(),
    );
    let formatted = async {
        quarry_disk::prepare_root(&w.root).map_err(|e| e.to_string())?;
        // The checkpoint first: a drive is never formatted without it.
        crate::drive_heal::mark_fresh_drive(&w.root, w.set, w.position)
            .map_err(|e| e.to_string())?;
        drive.write_format(&f).await.map_err(|e| e.to_string())
    }
    .await;
    if let Err(e) = formatted {
        warn!(drive = drive.endpoint(), error = %e, "cannot format the replaced drive; trying again at the next check");
        return;
    }
    warn!(
        drive = drive.endpoint(),
        set = w.set,
        position = w.position,
        "formatted a drive replaced while the server runs into its slot; it is healed in the background"
    );
    server.start_drive_heal(w.set, w.position, &w.root);
}

/// The format another drive of the set holds, if it is of this deployment and names the slot.
async fn reference_format(server: &ErasureServer, w: &Watched) -> Option<FormatV1> {
    let set = server.sets().get(w.set)?;
    for (pos, d) in set.drives.iter().enumerate() {
        if pos == w.position {
            continue;
        }
        if let Ok(Some(f)) = d.read_format().await {
            let names_slot = f
                .sets
                .get(w.set)
                .is_some_and(|s| s.len() == set.drives.len());
            if f.deployment_id == server.deployment_id() && names_slot {
                return Some(f);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_is_not_a_mount_point_and_the_root_is() {
        let dir = std::env::temp_dir().join(format!("quarry-watch-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        // A directory made here shares its parent's filesystem.
        assert!(!is_mount_point(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        // /proc is its own filesystem wherever this runs.
        assert!(is_mount_point(Path::new("/proc")));
    }
}
