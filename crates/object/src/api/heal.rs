//! The types of the heal calls of [`crate::ObjectLayer`] and of a set's object heal.

/// At most this many healed and this many failed objects are named in a [`HealReport`]; the
/// counts cover all of them.
pub const REPORT_DETAILS: usize = 100;

/// What a heal of many objects did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealReport {
    /// Buckets walked.
    pub buckets: u64,
    /// Objects checked.
    pub scanned: u64,
    /// Objects rewritten on at least one drive.
    pub healed: u64,
    /// Drive copies rewritten, over all objects.
    pub healed_drives: u64,
    /// Bucket state set right, one per drive and item: a bucket directory made, a configuration
    /// blob or an upload's metadata written, a leftover removed.
    pub bucket_items_healed: u64,
    /// Objects that could not be checked or healed on every drive, and buckets whose own state
    /// (directory, configuration, uploads) could not be, and listings that failed.
    pub failed: u64,
    /// The first [`REPORT_DETAILS`] healed objects.
    pub healed_objects: Vec<HealedObject>,
    /// The first [`REPORT_DETAILS`] failures.
    pub failed_objects: Vec<FailedObject>,
    /// Whether more objects were healed or failed than are named.
    pub truncated: bool,
}

/// An object a heal rewrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealedObject {
    pub bucket: String,
    pub key: String,
    /// Endpoints of the drives that got a new copy.
    pub drives: Vec<String>,
}

/// An object a heal could not check or heal completely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedObject {
    pub bucket: String,
    /// Empty when the bucket's listing or its own state's heal failed.
    pub key: String,
    /// Why: `drive: error` for each drive left unhealed, or the error of the whole heal.
    pub reason: String,
}

/// What healing one object did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealResult {
    /// Drive endpoints whose copy was rewritten.
    pub healed: Vec<String>,
    /// Drive endpoints that could not be healed now (offline, failing), with the reason.
    pub failed: Vec<(String, String)>,
}
