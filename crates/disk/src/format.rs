//! `.quarry.sys/format.json`: which deployment a drive belongs to, its own id, and the layout of
//! the erasure sets it was formatted with. Versioned JSON, written once when the deployment is
//! first formatted and checked at every start-up.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::drive::{DriveError, Result};

/// The format file version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Contents of `format.json`, version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormatV1 {
    /// Always [`FORMAT_VERSION`] when written by this build.
    pub version: u32,
    /// Identical on every drive of the deployment.
    pub deployment_id: Uuid,
    /// This drive.
    pub drive_id: Uuid,
    /// The drive ids of every erasure set, in set order and, within a set, in drive position order.
    /// Identical on every drive of the deployment.
    pub sets: Vec<Vec<Uuid>>,
}

impl FormatV1 {
    /// A format of the current version.
    pub fn new(deployment_id: Uuid, drive_id: Uuid, sets: Vec<Vec<Uuid>>) -> FormatV1 {
        FormatV1 {
            version: FORMAT_VERSION,
            deployment_id,
            drive_id,
            sets,
        }
    }

    /// `(set index, position in the set)` of this drive, or `None` if `sets` does not name it.
    pub fn position(&self) -> Option<(usize, usize)> {
        self.sets.iter().enumerate().find_map(|(s, set)| {
            set.iter()
                .position(|id| *id == self.drive_id)
                .map(|p| (s, p))
        })
    }

    /// Whether `other` describes the same deployment and layout (drive ids may differ).
    pub fn same_deployment(&self, other: &FormatV1) -> bool {
        self.deployment_id == other.deployment_id && self.sets == other.sets
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing plain structs of uuids and integers cannot fail.
        serde_json::to_vec_pretty(self).expect("FormatV1 serializes to JSON")
    }

    /// Parses `format.json`: the version first (unknown -> `UnsupportedVersion`), then the rest
    /// (bad JSON -> `CorruptMeta`).
    pub fn from_bytes(b: &[u8]) -> Result<FormatV1> {
        #[derive(Deserialize)]
        struct Probe {
            version: u32,
        }
        let probe: Probe = serde_json::from_slice(b)
            .map_err(|e| DriveError::CorruptMeta(format!("format.json: {e}")))?;
        if probe.version != FORMAT_VERSION {
            return Err(DriveError::UnsupportedVersion {
                found: probe.version,
                supported: FORMAT_VERSION,
            });
        }
        serde_json::from_slice(b).map_err(|e| DriveError::CorruptMeta(format!("format.json: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_position() {
        let ids: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
        let f = FormatV1::new(
            Uuid::new_v4(),
            ids[3],
            vec![ids[..2].to_vec(), ids[2..].to_vec()],
        );
        let back = FormatV1::from_bytes(&f.to_bytes()).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.position(), Some((1, 1)));
        let mut other = f.clone();
        other.drive_id = ids[0];
        assert!(f.same_deployment(&other));
        assert_eq!(other.position(), Some((0, 0)));
        other.deployment_id = Uuid::new_v4();
        assert!(!f.same_deployment(&other));
    }

    #[test]
    fn unknown_version_and_garbage() {
        let f = FormatV1::new(Uuid::new_v4(), Uuid::new_v4(), vec![]);
        let mut v: serde_json::Value = serde_json::from_slice(&f.to_bytes()).unwrap();
        v["version"] = 7.into();
        v["sets"] = "a layout this build cannot parse".into();
        match FormatV1::from_bytes(&serde_json::to_vec(&v).unwrap()) {
            Err(DriveError::UnsupportedVersion {
                found: 7,
                supported: 1,
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            FormatV1::from_bytes(b"{not json"),
            Err(DriveError::CorruptMeta(_))
        ));
        assert!(matches!(
            FormatV1::from_bytes(br#"{"version":1}"#),
            Err(DriveError::CorruptMeta(_))
        ));
    }
}
