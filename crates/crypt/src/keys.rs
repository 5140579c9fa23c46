//! Keys: an object's own key and the part keys derived from it, the sealing of object keys
//! under a key-encryption key, and SSE-C customer keys.
//!
//! Envelope encryption: every object gets a fresh random [`ObjectKey`]. What is stored is only
//! that key *sealed* ([`SealedKey`]): AES-256-GCM under a key-encryption key derived with
//! HKDF-SHA256 from a secret (a master key of the key service, or the customer's SSE-C key) and
//! a random salt, with the object's context (bucket, key, and for SSE-KMS the encryption
//! context) as associated data. So a sealed key opens only with its secret and only for the
//! object it was made for, and re-sealing it under another master key (rotation) leaves the
//! object's data untouched.
//!
//! An SSE-C key is never stored. Its GCM tag over the sealed object key is the keyed
//! fingerprint that tells a wrong key from the right one: a wrong key fails to unseal.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use aws_lc_rs::hkdf;
use base64::Engine;
use md5::{Digest, Md5};
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use crate::{CryptError, Result};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The format version of [`SealedKey`]'s encoding.
const SEALED_VERSION: u8 = 1;
const SEAL_INFO: &[u8] = b"quarry/seal/v1";
const PART_INFO: &[u8] = b"quarry/package/v1/part";
const UPLOAD_PART_INFO: &[u8] = b"quarry/package/v1/upload-part";

/// 32 key bytes, wiped when dropped.
#[derive(Clone)]
pub struct Secret32([u8; 32]);

impl Drop for Secret32 {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl Secret32 {
    pub fn from_bytes(b: [u8; 32]) -> Self {
        Secret32(b)
    }

    pub fn expose(&self) -> &[u8; 32] {
        &self.0
    }

    fn random() -> Result<Self> {
        let mut b = [0u8; 32];
        aws_lc_rs::rand::fill(&mut b).map_err(|_| CryptError::Backend)?;
        Ok(Secret32(b))
    }
}

impl std::fmt::Debug for Secret32 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret32(..)")
    }
}

struct Len32;
impl hkdf::KeyType for Len32 {
    fn len(&self) -> usize {
        32
    }
}

fn hkdf32(secret: &[u8], salt: &[u8], info: &[&[u8]]) -> Result<Secret32> {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(secret);
    let okm = prk.expand(info, Len32).map_err(|_| CryptError::Backend)?;
    let mut out = [0u8; 32];
    okm.fill(&mut out).map_err(|_| CryptError::Backend)?;
    Ok(Secret32(out))
}

fn aead(key: &[u8; 32]) -> LessSafeKey {
    // A 32-byte key is always a valid AES-256 key.
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).expect("AES-256 takes 32-byte keys"))
}

/// An object's own random key; its parts are sealed with keys derived from it.
#[derive(Clone, Debug)]
pub struct ObjectKey(Secret32);

impl ObjectKey {
    /// A fresh key from the system's random generator.
    pub fn random() -> Result<Self> {
        Ok(ObjectKey(Secret32::random()?))
    }

    /// The key of part `part` (1 for a single-part object): HKDF-SHA256 of the object key with
    /// the part number, so packages of one part never open as another's.
    pub fn part_key(&self, part: u32) -> PartKey {
        // HKDF-Expand of 32 bytes with SHA-256 cannot fail.
        let k = hkdf32(&self.0 .0, &[], &[PART_INFO, &part.to_be_bytes()])
            .expect("HKDF-SHA256 expands to 32 bytes");
        PartKey(k)
    }

    /// The key of a multipart upload's part: HKDF-SHA256 of the object key with the part
    /// number the client gave and `part_id`, a value unique to this upload of the part (its
    /// random data directory). A part uploaded again under the same number gets another key,
    /// so no two plaintexts are ever sealed with one key and nonce; and the key does not
    /// depend on where the part ends up in the completed object.
    pub fn upload_part_key(&self, number: u32, part_id: &[u8]) -> PartKey {
        let k = hkdf32(
            &self.0 .0,
            &[],
            &[UPLOAD_PART_INFO, &number.to_be_bytes(), part_id],
        )
        .expect("HKDF-SHA256 expands to 32 bytes");
        PartKey(k)
    }

    /// 16 bytes derived from this key, a label and `data` (HKDF-SHA256): values that are
    /// stable for the object and say nothing about `data` without the key (e.g. an ETag that
    /// must not reveal the plaintext's MD5).
    pub fn derive16(&self, label: &[u8], data: &[u8]) -> [u8; 16] {
        let k = hkdf32(&self.0 .0, &[], &[label, data]).expect("HKDF-SHA256 expands to 32 bytes");
        let mut out = [0u8; 16];
        out.copy_from_slice(&k.expose()[..16]);
        out
    }

    /// Seals this key under `secret` (named `key_id`) for `context`.
    pub fn seal(&self, key_id: &str, secret: &Secret32, context: &[u8]) -> Result<SealedKey> {
        if key_id.len() > u8::MAX as usize {
            return Err(CryptError::Misuse("key id longer than 255 bytes"));
        }
        let salt = Secret32::random()?.0;
        let kek = hkdf32(&secret.0, &salt, &[SEAL_INFO])?;
        let mut sealed = [0u8; 48];
        sealed[..32].copy_from_slice(&self.0 .0);
        let tag = aead(&kek.0)
            .seal_in_place_separate_tag(
                // The key-encryption key is new for every seal (random salt): one nonce per key.
                Nonce::assume_unique_for_key([0; 12]),
                Aad::from(seal_aad(key_id, context)),
                &mut sealed[..32],
            )
            .map_err(|_| CryptError::Backend)?;
        sealed[32..].copy_from_slice(tag.as_ref());
        Ok(SealedKey {
            key_id: key_id.to_string(),
            salt,
            sealed,
        })
    }
}

fn seal_aad(key_id: &str, context: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(SEAL_INFO.len() + 1 + key_id.len() + context.len());
    aad.extend_from_slice(SEAL_INFO);
    aad.push(key_id.len() as u8);
    aad.extend_from_slice(key_id.as_bytes());
    aad.extend_from_slice(context);
    aad
}

/// The key one part's packages are sealed with.
pub struct PartKey(Secret32);

impl PartKey {
    pub(crate) fn aead(&self) -> LessSafeKey {
        aead(&self.0 .0)
    }
}

/// An object key sealed under a named secret, as recorded in the object's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedKey {
    /// The master key it is sealed under (`sse-c` for a customer key).
    pub key_id: String,
    salt: [u8; 32],
    /// The object key's ciphertext and GCM tag.
    sealed: [u8; 48],
}

impl SealedKey {
    /// Opens the object key with `secret`; `Unseal` if the secret or the context is not the one
    /// it was sealed with.
    pub fn unseal(&self, secret: &Secret32, context: &[u8]) -> Result<ObjectKey> {
        let kek = hkdf32(&secret.0, &self.salt, &[SEAL_INFO])?;
        let mut buf = self.sealed;
        let (ct, tag) = buf.split_at_mut(32);
        let mut out = [0u8; 32];
        let r = aead(&kek.0).open_separate_gather(
            Nonce::assume_unique_for_key([0; 12]),
            Aad::from(seal_aad(&self.key_id, context)),
            ct,
            tag,
            &mut out,
        );
        buf.zeroize();
        match r {
            Ok(()) => Ok(ObjectKey(Secret32(out))),
            Err(_) => {
                out.zeroize();
                Err(CryptError::Unseal {
                    key_id: self.key_id.clone(),
                })
            }
        }
    }

    /// The encoding stored in metadata: base64 of
    /// `version (1) | id length (1) | id | salt (32) | sealed key and tag (48)`.
    pub fn encode(&self) -> String {
        let mut b = Vec::with_capacity(2 + self.key_id.len() + 80);
        b.push(SEALED_VERSION);
        b.push(self.key_id.len() as u8);
        b.extend_from_slice(self.key_id.as_bytes());
        b.extend_from_slice(&self.salt);
        b.extend_from_slice(&self.sealed);
        B64.encode(b)
    }

    /// Decodes [`SealedKey::encode`]'s form; an unknown version is an error, never a guess.
    pub fn decode(s: &str) -> Result<Self> {
        let b = B64
            .decode(s)
            .map_err(|_| CryptError::BadSealedKey("not base64".into()))?;
        let (&version, rest) = b
            .split_first()
            .ok_or_else(|| CryptError::BadSealedKey("empty".into()))?;
        if version != SEALED_VERSION {
            return Err(CryptError::BadSealedKey(format!(
                "format version {version} (this build reads {SEALED_VERSION})"
            )));
        }
        let (&id_len, rest) = rest
            .split_first()
            .ok_or_else(|| CryptError::BadSealedKey("truncated".into()))?;
        let id_len = id_len as usize;
        if rest.len() != id_len + 80 {
            return Err(CryptError::BadSealedKey(format!(
                "{} bytes after the key id length, expected {}",
                rest.len(),
                id_len + 80
            )));
        }
        let key_id = std::str::from_utf8(&rest[..id_len])
            .map_err(|_| CryptError::BadSealedKey("key id is not UTF-8".into()))?
            .to_string();
        let mut salt = [0u8; 32];
        salt.copy_from_slice(&rest[id_len..id_len + 32]);
        let mut sealed = [0u8; 48];
        sealed.copy_from_slice(&rest[id_len + 32..]);
        Ok(SealedKey {
            key_id,
            salt,
            sealed,
        })
    }
}

/// The context an object key is bound to: the bucket, the key, and any further pairs (the
/// SSE-KMS encryption context), length-prefixed so no two contexts encode alike.
pub fn context(bucket: &str, key: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bucket.len() + key.len() + 16);
    let mut put = |s: &str| {
        out.extend_from_slice(&(s.len() as u32).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    put(bucket);
    put(key);
    for (k, v) in extra {
        put(k);
        put(v);
    }
    out
}

/// The key id SSE-C object keys are sealed under.
pub const CUSTOMER_KEY_ID: &str = "sse-c";

/// An SSE-C key as sent in the request headers; never stored, wiped when dropped.
#[derive(Clone, Debug)]
pub struct CustomerKey(Secret32);

impl CustomerKey {
    /// Checks the `x-amz-server-side-encryption-customer-key` (base64 of 32 bytes) against
    /// `...-customer-key-MD5` (base64 of its MD5), comparing in constant time.
    pub fn from_headers(key_b64: &str, md5_b64: &str) -> Result<Self> {
        let mut raw = B64
            .decode(key_b64.trim())
            .map_err(|_| CryptError::BadCustomerKey("the key is not valid base64"))?;
        if raw.len() != 32 {
            raw.zeroize();
            return Err(CryptError::BadCustomerKey(
                "the key is not 256 bits (32 bytes)",
            ));
        }
        let want = B64
            .decode(md5_b64.trim())
            .map_err(|_| CryptError::BadCustomerKey("the key MD5 is not valid base64"))?;
        let got = Md5::digest(&raw);
        let same: bool = got.as_slice().ct_eq(&want).into();
        let mut b = [0u8; 32];
        b.copy_from_slice(&raw);
        raw.zeroize();
        let key = CustomerKey(Secret32(b));
        if !same {
            return Err(CryptError::BadCustomerKey(
                "the key MD5 does not match the key",
            ));
        }
        Ok(key)
    }

    /// The secret to seal and unseal object keys with.
    pub fn secret(&self) -> &Secret32 {
        &self.0
    }

    /// base64 of the key's MD5, as echoed in `...-customer-key-MD5` response headers.
    pub fn md5_b64(&self) -> String {
        B64.encode(Md5::digest(self.0 .0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_round_trip_and_refusals() {
        let secret = Secret32::random().unwrap();
        let other = Secret32::random().unwrap();
        let ok = ObjectKey::random().unwrap();
        let ctx = context("b", "k", &[]);
        let sealed = ok.seal("master", &secret, &ctx).unwrap();
        let back = SealedKey::decode(&sealed.encode()).unwrap();
        assert_eq!(back, sealed);
        let opened = back.unseal(&secret, &ctx).unwrap();
        assert_eq!(opened.0.expose(), ok.0.expose());
        assert!(back.unseal(&other, &ctx).is_err(), "another secret");
        assert!(
            back.unseal(&secret, &context("b", "k2", &[])).is_err(),
            "another object"
        );
        let mut renamed = back.clone();
        renamed.key_id = "other".into();
        assert!(renamed.unseal(&secret, &ctx).is_err(), "another key id");
        for i in 0..48 {
            let mut t = back.clone();
            t.sealed[i] ^= 1;
            assert!(t.unseal(&secret, &ctx).is_err(), "flipped byte {i}");
        }
        let mut t = back.clone();
        t.salt[0] ^= 1;
        assert!(t.unseal(&secret, &ctx).is_err(), "flipped salt");
    }

    #[test]
    fn sealed_key_decode_refuses_junk() {
        assert!(SealedKey::decode("").is_err());
        assert!(SealedKey::decode("!!").is_err());
        assert!(SealedKey::decode(&B64.encode([2u8, 0])).is_err());
        assert!(SealedKey::decode(&B64.encode([1u8, 3, b'a'])).is_err());
    }

    #[test]
    fn contexts_do_not_collide() {
        assert_ne!(context("ab", "c", &[]), context("a", "bc", &[]));
        assert_ne!(context("a", "b", &[("x", "y")]), context("a", "b", &[]));
    }

    #[test]
    fn customer_key_headers() {
        let raw = [9u8; 32];
        let key = B64.encode(raw);
        let md5 = B64.encode(Md5::digest(raw));
        let ck = CustomerKey::from_headers(&key, &md5).unwrap();
        assert_eq!(ck.md5_b64(), md5);
        assert!(CustomerKey::from_headers(&key, &B64.encode([0u8; 16])).is_err());
        assert!(CustomerKey::from_headers(&B64.encode([9u8; 16]), &md5).is_err());
        assert!(CustomerKey::from_headers("***", &md5).is_err());
    }

    #[test]
    fn part_keys_differ() {
        let ok = ObjectKey::random().unwrap();
        assert_ne!(ok.part_key(1).0.expose(), ok.part_key(2).0.expose());
        let a = ok.upload_part_key(1, b"dir-a");
        assert_ne!(a.0.expose(), ok.upload_part_key(1, b"dir-b").0.expose());
        assert_ne!(a.0.expose(), ok.upload_part_key(2, b"dir-a").0.expose());
        assert_ne!(a.0.expose(), ok.part_key(1).0.expose());
        assert_eq!(a.0.expose(), ok.upload_part_key(1, b"dir-a").0.expose());
    }
}
