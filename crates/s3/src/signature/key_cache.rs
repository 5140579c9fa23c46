//! SigV4 signing keys, derived once per (secret, date, region, service) and kept.
//!
//! Deriving a key is four chained HMAC-SHA256s, more than the rest of a verification; a key only
//! changes with its scope's date, so every request of a client on one day needs the same one.
//! The cache is keyed by a SHA-256 fingerprint of the secret (not the secret itself, and not the
//! access key), so a credential whose secret changes never meets its old key, and the cache holds
//! no copy of any secret. It is bounded: when full it is emptied (entries are per day, so it
//! refills with what is in use). Neither keys nor fingerprints are ever logged or printed.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use sha2::{Digest as _, Sha256};

/// Most keys kept: far more than (credentials × regions × two dates around midnight) of a
/// deployment, small in memory (about 100 bytes each).
pub(crate) const CAPACITY: usize = 4096;

#[derive(PartialEq, Eq, Hash)]
struct Scope {
    secret: [u8; 32],
    date: Box<str>,
    region: Box<str>,
    service: Box<str>,
}

type Keys = HashMap<Scope, [u8; 32]>;

fn keys() -> &'static Mutex<Keys> {
    static KEYS: OnceLock<Mutex<Keys>> = OnceLock::new();
    KEYS.get_or_init(Default::default)
}

/// The signing key for the scope, from the cache or from `derive` (then kept).
pub(crate) fn signing_key(
    secret: &str,
    date: &str,
    region: &str,
    service: &str,
    derive: fn(&str, &str, &str, &str) -> [u8; 32],
) -> [u8; 32] {
    let scope = Scope {
        secret: Sha256::digest(secret.as_bytes()).into(),
        date: date.into(),
        region: region.into(),
        service: service.into(),
    };
    // The map is only inserted into or cleared whole, so a panic elsewhere leaves it consistent.
    if let Some(key) = keys()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&scope)
    {
        return *key;
    }
    let key = derive(secret, date, region, service);
    let mut map = keys().lock().unwrap_or_else(PoisonError::into_inner);
    if map.len() >= CAPACITY {
        map.clear();
    }
    map.insert(scope, key);
    key
}

/// Keys kept now (for tests).
#[cfg(test)]
pub(crate) fn len() -> usize {
    keys().lock().unwrap_or_else(PoisonError::into_inner).len()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::signature::v4::derive_signing_key;

    static DERIVED: AtomicUsize = AtomicUsize::new(0);

    fn counting(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
        DERIVED.fetch_add(1, Ordering::SeqCst);
        derive_signing_key(secret, date, region, service)
    }

    #[test]
    fn a_key_is_derived_once_per_scope_and_equals_the_derived_one() {
        // Secrets no other test uses, so the counts are this test's alone.
        let (a, b) = ("key-cache-test/secret-a", "key-cache-test/secret-b");
        let first = signing_key(a, "20240102", "us-east-1", "s3", counting);
        let calls = DERIVED.load(Ordering::SeqCst);
        assert_eq!(first, derive_signing_key(a, "20240102", "us-east-1", "s3"));
        assert_eq!(
            signing_key(a, "20240102", "us-east-1", "s3", counting),
            first
        );
        assert_eq!(
            DERIVED.load(Ordering::SeqCst),
            calls,
            "second call derived again"
        );
        // Any other part of the scope, and another secret, is another key.
        for (secret, date, region) in [
            (b, "20240102", "us-east-1"),
            (a, "20240103", "us-east-1"),
            (a, "20240102", "eu-west-1"),
        ] {
            let k = signing_key(secret, date, region, "s3", counting);
            assert_ne!(k, first);
            assert_eq!(k, derive_signing_key(secret, date, region, "s3"));
        }
    }

    #[test]
    fn the_cache_stays_bounded() {
        for day in 0..CAPACITY + 10 {
            signing_key(
                "key-cache-test/bound",
                &format!("2024{day:08}"),
                "us-east-1",
                "s3",
                derive_signing_key,
            );
            assert!(len() <= CAPACITY);
        }
    }
}
