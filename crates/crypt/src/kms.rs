//! The key service: where object keys for SSE-S3 and SSE-KMS come from and are opened again.
//!
//! [`Kms`] is the seam: generate a data key sealed under a named master key, unseal one,
//! re-seal one under another master key (rotation without rewriting data). An external service
//! (KES, Vault transit, AWS KMS) implements the same three calls; only the sealed key crosses
//! it. [`LocalKms`] is the built-in one: named 256-bit master keys held in memory, given as
//! `name:base64` (MinIO's `MINIO_KMS_SECRET_KEY` form) in `QUARRY_KMS_SECRET_KEY` (several
//! separated by commas) or one per line in a key file.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;

use crate::keys::{ObjectKey, SealedKey, Secret32, CUSTOMER_KEY_ID};
use crate::{CryptError, Result};

/// A key service: seals and unseals object keys under named master keys.
pub trait Kms: Send + Sync + 'static {
    /// The master key used when a request names none (SSE-S3, and SSE-KMS without a key id).
    fn default_key_id(&self) -> &str;

    /// Whether a master key of this name exists.
    fn has_key(&self, key_id: &str) -> bool;

    /// The names of every master key, for `quarry admin kms` listings.
    fn key_ids(&self) -> Vec<String>;

    /// A fresh object key and its sealing under `key_id` for `context`.
    fn generate(&self, key_id: &str, context: &[u8]) -> Result<(ObjectKey, SealedKey)>;

    /// Opens a sealed object key (sealed under its own `key_id`) for `context`.
    fn unseal(&self, sealed: &SealedKey, context: &[u8]) -> Result<ObjectKey>;

    /// Re-seals a sealed object key under `to_key_id`: the object's data and its object key
    /// stay as they are; only the envelope changes.
    fn reseal(&self, sealed: &SealedKey, context: &[u8], to_key_id: &str) -> Result<SealedKey> {
        let key = self.unseal(sealed, context)?;
        self.seal_with(&key, to_key_id, context)
    }

    /// Seals an existing object key under `key_id` (what [`Kms::reseal`] needs).
    fn seal_with(&self, key: &ObjectKey, key_id: &str, context: &[u8]) -> Result<SealedKey>;
}

/// The built-in key service: named master keys in memory.
pub struct LocalKms {
    keys: BTreeMap<String, Secret32>,
    default: String,
}

impl std::fmt::Debug for LocalKms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalKms")
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .field("default", &self.default)
            .finish()
    }
}

/// Names: 1 to 64 bytes of `[A-Za-z0-9._-]` (never `sse-c`, which names customer keys).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != CUSTOMER_KEY_ID
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl LocalKms {
    /// Parses `name:base64-of-32-bytes` entries separated by commas or newlines (blank lines
    /// and `#` comments are skipped). The first is the default key unless `default` names
    /// another. Errors name the entry, never its key bytes.
    pub fn parse(text: &str, default: Option<&str>) -> Result<Self> {
        let mut keys = BTreeMap::new();
        let mut first = None;
        for (i, entry) in text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .enumerate()
        {
            let (name, b64) = entry
                .split_once(':')
                .ok_or_else(|| CryptError::Config(format!("entry {} is not name:base64", i + 1)))?;
            let name = name.trim();
            if !valid_name(name) {
                return Err(CryptError::Config(format!(
                    "entry {}: key name {name:?} is not 1 to 64 of [A-Za-z0-9._-] (or is reserved)",
                    i + 1
                )));
            }
            let mut raw = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|_| {
                    CryptError::Config(format!("key {name:?}: the key is not valid base64"))
                })?;
            if raw.len() != 32 {
                let n = raw.len();
                zeroize::Zeroize::zeroize(&mut raw);
                return Err(CryptError::Config(format!(
                    "key {name:?}: {n} bytes, a master key is 32"
                )));
            }
            let mut b = [0u8; 32];
            b.copy_from_slice(&raw);
            zeroize::Zeroize::zeroize(&mut raw);
            if keys
                .insert(name.to_string(), Secret32::from_bytes(b))
                .is_some()
            {
                return Err(CryptError::Config(format!("key {name:?} is given twice")));
            }
            first.get_or_insert_with(|| name.to_string());
        }
        let Some(first) = first else {
            return Err(CryptError::Config("no master key given".into()));
        };
        let default = default.map(str::to_string).unwrap_or(first);
        if !keys.contains_key(&default) {
            return Err(CryptError::Config(format!(
                "the default key {default:?} is not among the keys"
            )));
        }
        Ok(LocalKms { keys, default })
    }

    /// Reads [`LocalKms::parse`]'s form from a file; refuses a file others can read.
    pub fn from_file(path: &Path, default: Option<&str>) -> Result<Self> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(path)
                .map_err(|e| CryptError::Config(format!("{}: {e}", path.display())))?;
            if meta.permissions().mode() & 0o077 != 0 {
                return Err(CryptError::Config(format!(
                    "{}: the key file is readable by others (chmod 600 it)",
                    path.display()
                )));
            }
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| CryptError::Config(format!("{}: {e}", path.display())))?;
        Self::parse(&text, default).map_err(|e| match e {
            CryptError::Config(m) => CryptError::Config(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    fn secret(&self, key_id: &str) -> Result<&Secret32> {
        self.keys
            .get(key_id)
            .ok_or_else(|| CryptError::NoSuchKey(key_id.to_string()))
    }
}

impl Kms for LocalKms {
    fn default_key_id(&self) -> &str {
        &self.default
    }

    fn has_key(&self, key_id: &str) -> bool {
        self.keys.contains_key(key_id)
    }

    fn key_ids(&self) -> Vec<String> {
        self.keys.keys().cloned().collect()
    }

    fn generate(&self, key_id: &str, context: &[u8]) -> Result<(ObjectKey, SealedKey)> {
        let secret = self.secret(key_id)?;
        let key = ObjectKey::random()?;
        let sealed = key.seal(key_id, secret, context)?;
        Ok((key, sealed))
    }

    fn unseal(&self, sealed: &SealedKey, context: &[u8]) -> Result<ObjectKey> {
        sealed.unseal(self.secret(&sealed.key_id)?, context)
    }

    fn seal_with(&self, key: &ObjectKey, key_id: &str, context: &[u8]) -> Result<SealedKey> {
        key.seal(key_id, self.secret(key_id)?, context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    #[test]
    fn parses_named_keys() {
        let text = format!("k1:{}, k2:{}", b64(&[1; 32]), b64(&[2; 32]));
        let kms = LocalKms::parse(&text, None).unwrap();
        assert_eq!(kms.default_key_id(), "k1");
        assert_eq!(kms.key_ids(), vec!["k1", "k2"]);
        let kms = LocalKms::parse(&text, Some("k2")).unwrap();
        assert_eq!(kms.default_key_id(), "k2");
        assert!(!format!("{kms:?}").contains(&b64(&[1; 32])));
    }

    #[test]
    fn refuses_bad_config_without_echoing_keys() {
        let k = b64(&[3; 31]);
        for (text, default) in [
            ("", None),
            ("nocolon", None),
            (&*format!("k:{k}"), None),
            (&*format!("sse-c:{}", b64(&[1; 32])), None),
            (&*format!("a b:{}", b64(&[1; 32])), None),
            (&*format!("k:{}\nk:{}", b64(&[1; 32]), b64(&[2; 32])), None),
            (&*format!("k:{}", b64(&[1; 32])), Some("other")),
        ] {
            let e = LocalKms::parse(text, default).unwrap_err();
            assert!(!e.to_string().contains(&k), "{e}");
        }
    }

    #[test]
    fn generate_unseal_and_rotate() {
        let text = format!("old:{}\nnew:{}", b64(&[1; 32]), b64(&[2; 32]));
        let kms = LocalKms::parse(&text, None).unwrap();
        let ctx = crate::keys::context("b", "k", &[]);
        let (key, sealed) = kms.generate("old", &ctx).unwrap();
        let before = key.part_key(1);
        let rotated = kms.reseal(&sealed, &ctx, "new").unwrap();
        assert_eq!(rotated.key_id, "new");
        let after = kms.unseal(&rotated, &ctx).unwrap().part_key(1);
        // Same object key: data sealed before the rotation still opens.
        let mut out = bytes::BytesMut::new();
        crate::Encryptor::new(&before)
            .seal(b"hello", true, &mut out)
            .unwrap();
        let r = crate::PackageRange::new(5, 0, 5);
        let mut d = crate::Decryptor::new(&after, 5, &r);
        let mut plain = bytes::BytesMut::new();
        d.push(&out, &mut plain).unwrap();
        d.finish().unwrap();
        assert_eq!(&plain[..], b"hello");
        // Without the old key the old envelope no longer opens; the new one does.
        let only_new = LocalKms::parse(&format!("new:{}", b64(&[2; 32])), None).unwrap();
        assert_eq!(
            only_new.unseal(&sealed, &ctx).unwrap_err(),
            CryptError::NoSuchKey("old".into())
        );
        assert!(only_new.unseal(&rotated, &ctx).is_ok());
        assert!(kms.generate("missing", &ctx).is_err());
    }

    #[test]
    fn key_file_must_be_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys");
        std::fs::write(&p, format!("# master keys\nk:{}\n", b64(&[5; 32]))).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(LocalKms::from_file(&p, None).is_err());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(LocalKms::from_file(&p, None).unwrap().default_key_id(), "k");
    }
}
