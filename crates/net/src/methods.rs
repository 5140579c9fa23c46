//! The registry of the internode RPC: every method id and every application error code a node
//! answers with, declared here and nowhere else, so that two services can never take the same id
//! (a test checks) and a request is routed by what its id *is* ([`Service::of`]), not by number
//! ranges spread over the services' files.
//!
//! The services themselves live where their messages are: the drive protocol in
//! [`crate::drive_proto`] (one id per `Drive` method, from its method table), the verbs data
//! plane's requests in [`crate::verbs_dataplane`], the lock service and the node info in
//! `quarry-node`. Ids and codes are part of the wire format: never reuse or renumber one.

use crate::rpc::codes::APPLICATION_BASE;

/// First id of the drive protocol: `drive_proto::Method` ids are `DRIVE_BASE + n`.
pub const DRIVE_BASE: u16 = 100;
/// Last id the drive protocol may take.
pub const DRIVE_LAST: u16 = 189;

/// Verbs data plane: set up an RC connection.
pub const VERBS_CONNECT: u16 = 190;
/// Verbs data plane: read a shard range and RDMA-WRITE it into the requester's buffer.
pub const VERBS_READ: u16 = 191;
/// Verbs data plane: RDMA-READ an append's bytes from the requester into a shard writer.
pub const VERBS_APPEND: u16 = 192;

/// Lock service: grant the lock if it is free, expired, or held by the same uid (extend it).
pub const LOCK_LOCK: u16 = 200;
/// Lock service: extend the lease, only if the uid holds the lock.
pub const LOCK_REFRESH: u16 = 201;
/// Lock service: release the lock, only if the uid holds it.
pub const LOCK_UNLOCK: u16 = 202;

/// The node's index and layout fingerprint.
pub const NODE_INFO: u16 = 300;

/// The service a method belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// A `Drive` call on one of the node's drives (`drive_proto`).
    Drive,
    /// A request of the verbs data plane, served next to the drives.
    Verbs,
    /// The per-object lock table.
    Lock,
    /// Who the node is.
    NodeInfo,
}

impl Service {
    /// The service of `method`; `None` for an id no service has.
    pub fn of(method: u16) -> Option<Service> {
        match method {
            DRIVE_BASE..=DRIVE_LAST => Some(Service::Drive),
            VERBS_CONNECT | VERBS_READ | VERBS_APPEND => Some(Service::Verbs),
            LOCK_LOCK | LOCK_REFRESH | LOCK_UNLOCK => Some(Service::Lock),
            NODE_INFO => Some(Service::NodeInfo),
            _ => None,
        }
    }
}

/// Error-frame codes of the drive protocol: one per `DriveError` variant, then the drive
/// server's own refusals.
pub mod drive_codes {
    use super::APPLICATION_BASE;

    pub const VOLUME_NOT_FOUND: u16 = APPLICATION_BASE;
    pub const VOLUME_EXISTS: u16 = APPLICATION_BASE + 1;
    pub const VOLUME_NOT_EMPTY: u16 = APPLICATION_BASE + 2;
    pub const FILE_NOT_FOUND: u16 = APPLICATION_BASE + 3;
    /// Message: `"<offset> <wanted> <len>"` in decimal.
    pub const TRUNCATED: u16 = APPLICATION_BASE + 4;
    pub const CORRUPT_META: u16 = APPLICATION_BASE + 5;
    /// Message: `"<found> <supported>"` in decimal.
    pub const UNSUPPORTED_VERSION: u16 = APPLICATION_BASE + 6;
    pub const INVALID_NAME: u16 = APPLICATION_BASE + 7;
    pub const UNUSABLE: u16 = APPLICATION_BASE + 8;
    pub const DISK_FULL: u16 = APPLICATION_BASE + 9;
    pub const IO: u16 = APPLICATION_BASE + 10;
    /// The request could not be decoded (or speaks another drive protocol version).
    pub const BAD_REQUEST: u16 = APPLICATION_BASE + 100;
    /// The serving node has no drive of that index.
    pub const NO_SUCH_DRIVE: u16 = APPLICATION_BASE + 101;
    /// The shard writer is not open on the serving node (never opened, finished, aborted,
    /// reaped after idling, or the node restarted).
    pub const NO_SUCH_WRITER: u16 = APPLICATION_BASE + 102;
}

/// Error code of a lock table that is full.
pub const CODE_LOCK_TABLE_FULL: u16 = APPLICATION_BASE + 200;
/// Error code of a verbs holder whose RDMA transfer failed (its connection is gone).
pub const CODE_VERBS_FAILED: u16 = APPLICATION_BASE + 900;
/// Error code of a verbs holder that does not know the connection id (restarted, or dropped it).
pub const CODE_VERBS_NO_CONNECTION: u16 = APPLICATION_BASE + 901;
/// Error code of a verbs holder with no registered buffer free for the transfer right now: it
/// touched nothing, and the requester moves these bytes over TCP instead (load shedding, not a
/// failure: the connection stays).
pub const CODE_VERBS_BUSY: u16 = APPLICATION_BASE + 902;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive_proto::Method;
    use crate::rpc::codes;

    #[test]
    fn every_method_has_one_service_and_drive_methods_fit_their_range() {
        for m in Method::ALL {
            assert_eq!(Service::of(*m as u16), Some(Service::Drive), "{m:?}");
        }
        for (id, s) in [
            (VERBS_CONNECT, Service::Verbs),
            (VERBS_READ, Service::Verbs),
            (VERBS_APPEND, Service::Verbs),
            (LOCK_LOCK, Service::Lock),
            (LOCK_REFRESH, Service::Lock),
            (LOCK_UNLOCK, Service::Lock),
            (NODE_INFO, Service::NodeInfo),
        ] {
            assert_eq!(Service::of(id), Some(s), "{id}");
            assert!(
                Method::from_u16(id).is_none(),
                "{id} is also a drive method"
            );
        }
        assert_eq!(Service::of(0), None);
        assert_eq!(Service::of(DRIVE_BASE - 1), None);
        assert_eq!(Service::of(u16::MAX), None);
    }

    #[test]
    fn error_codes_are_distinct() {
        let all = [
            codes::UNKNOWN_METHOD,
            codes::BAD_REQUEST,
            codes::INTERNAL,
            codes::RESPONSE_TOO_LARGE,
            drive_codes::VOLUME_NOT_FOUND,
            drive_codes::VOLUME_EXISTS,
            drive_codes::VOLUME_NOT_EMPTY,
            drive_codes::FILE_NOT_FOUND,
            drive_codes::TRUNCATED,
            drive_codes::CORRUPT_META,
            drive_codes::UNSUPPORTED_VERSION,
            drive_codes::INVALID_NAME,
            drive_codes::UNUSABLE,
            drive_codes::DISK_FULL,
            drive_codes::IO,
            drive_codes::BAD_REQUEST,
            drive_codes::NO_SUCH_DRIVE,
            drive_codes::NO_SUCH_WRITER,
            CODE_LOCK_TABLE_FULL,
            CODE_VERBS_FAILED,
            CODE_VERBS_NO_CONNECTION,
            CODE_VERBS_BUSY,
        ];
        let mut seen = std::collections::HashSet::new();
        for c in all {
            assert!(seen.insert(c), "code {c} is declared twice");
        }
    }
}
