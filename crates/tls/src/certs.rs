//! A certificate directory in MinIO's layout, read and checked:
//!
//! ```text
//! <certs-dir>/public.crt           the node's certificate (PEM; the leaf first, then intermediates)
//! <certs-dir>/private.key          its private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC)
//! <certs-dir>/<name>/public.crt    another certificate, chosen by SNI when a client asks for a
//! <certs-dir>/<name>/private.key   name it covers (one subdirectory per extra domain)
//! <certs-dir>/CAs/*.crt|*.pem      CA certificates this node trusts: the cluster's CA (internode
//!                                  mutual TLS verifies peers against these, both ways)
//! ```
//!
//! Everything that can be wrong with the files is found here, before a listener uses them: a
//! missing or unreadable file, a file with no PEM certificate or key, a certificate that has
//! expired or is not valid yet, and a key that is not the certificate's. Each is its own
//! [`TlsError`] variant naming the file.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The certificate file of a certificate directory (and of each SNI subdirectory).
pub const PUBLIC_CRT: &str = "public.crt";
/// The private key file.
pub const PRIVATE_KEY: &str = "private.key";
/// The subdirectory of trusted CA certificates.
pub const CAS_DIR: &str = "CAs";

/// What is wrong with the TLS files or settings.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path} is missing: a certificate needs both {PUBLIC_CRT} and {PRIVATE_KEY} in its directory")]
    Missing { path: PathBuf },
    #[error("cannot read {path}: {source}")]
    Unreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: not valid PEM: {reason}")]
    BadPem { path: PathBuf, reason: String },
    #[error("{path} holds no certificate (expected a PEM block -----BEGIN CERTIFICATE-----)")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no private key (expected a PEM block BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)")]
    NoKey { path: PathBuf },
    #[error("{path}: the private key cannot be used: {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("{path}: the certificate cannot be parsed: {reason}")]
    BadCertificate { path: PathBuf, reason: String },
    #[error("{path}: the certificate expired on {not_after}")]
    Expired { path: PathBuf, not_after: String },
    #[error("{path}: the certificate is not valid before {not_before}")]
    NotYetValid { path: PathBuf, not_before: String },
    #[error(
        "{key} is not the private key of the certificate in {cert} (their public keys differ)"
    )]
    Mismatch { cert: PathBuf, key: PathBuf },
    #[error("{dir} holds no CA certificate (*.crt or *.pem): internode TLS verifies peers against the cluster's CA there")]
    NoCas { dir: PathBuf },
    #[error("no certificate in {dir}: {what} needs {PUBLIC_CRT} and {PRIVATE_KEY} there")]
    NoCertificates { dir: PathBuf, what: String },
    #[error("TLS configuration: {0}")]
    Config(String),
    #[error("certificate generation: {0}")]
    Generate(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl From<rustls::Error> for TlsError {
    fn from(e: rustls::Error) -> Self {
        TlsError::Config(e.to_string())
    }
}

/// One certificate with its key, ready for rustls, and what the log says about it.
#[derive(Debug, Clone)]
pub struct CertKey {
    pub certified: Arc<CertifiedKey>,
    /// The file the certificate came from.
    pub path: PathBuf,
    /// The leaf's subject, e.g. `CN=node1`.
    pub subject: String,
    /// DNS names and IP addresses the leaf covers (its subject alternative names).
    pub names: Vec<String>,
    pub not_after: SystemTime,
}

/// Everything a certificate directory holds.
#[derive(Debug, Clone)]
pub struct CertSet {
    pub dir: PathBuf,
    /// `public.crt` / `private.key`: served when no SNI certificate fits.
    pub default: CertKey,
    /// The subdirectories' certificates, by subdirectory name.
    pub domains: Vec<(String, CertKey)>,
    /// `CAs/`: trusted CA certificates (may be empty).
    pub cas: Vec<CertificateDer<'static>>,
}

/// The crypto provider every Quarry TLS configuration uses (aws-lc-rs: AES-GCM with AES-NI/VAES).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Whether `dir` holds a certificate (`public.crt` or `private.key`, so that one without the
/// other is an error rather than plain HTTP).
pub fn has_certificate(dir: &Path) -> bool {
    dir.join(PUBLIC_CRT).exists() || dir.join(PRIVATE_KEY).exists()
}

/// Reads and checks a certificate directory; `Ok(None)` when it holds no certificate at all.
/// Checked against the clock `now` (validity dates).
pub fn load_dir(dir: &Path, now: SystemTime) -> Result<Option<CertSet>, TlsError> {
    if !has_certificate(dir) {
        return Ok(None);
    }
    let provider = provider();
    let default = load_pair(dir, &provider, now)?;
    let mut domains = Vec::new();
    for (name, sub) in subdirs(dir)? {
        if name == CAS_DIR || !has_certificate(&sub) {
            continue;
        }
        domains.push((name, load_pair(&sub, &provider, now)?));
    }
    let cas = load_cas(&dir.join(CAS_DIR))?;
    Ok(Some(CertSet {
        dir: dir.to_path_buf(),
        default,
        domains,
        cas,
    }))
}

/// The subdirectories of `dir`, sorted by name (names that are not UTF-8 are skipped).
fn subdirs(dir: &Path) -> Result<Vec<(String, PathBuf)>, TlsError> {
    let rd = std::fs::read_dir(dir).map_err(|source| TlsError::Unreadable {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(n) = e.file_name().to_str() {
                out.push((n.to_owned(), p));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            TlsError::Missing {
                path: path.to_path_buf(),
            }
        } else {
            TlsError::Unreadable {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

/// Every certificate in a PEM file, in order; at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_path_buf(),
        },
        e => TlsError::BadPem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
    })
}

/// What the leaf certificate says of itself.
struct LeafFacts {
    subject: String,
    names: Vec<String>,
    not_before: SystemTime,
    not_after: SystemTime,
}

fn leaf_facts(path: &Path, der: &CertificateDer<'_>) -> Result<LeafFacts, TlsError> {
    let bad = |reason: String| TlsError::BadCertificate {
        path: path.to_path_buf(),
        reason,
    };
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| bad(e.to_string()))?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => names.push((*d).to_owned()),
                x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                    4 => names.push(
                        std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap_or_default())
                            .to_string(),
                    ),
                    16 => names.push(
                        std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap_or_default())
                            .to_string(),
                    ),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    let v = cert.validity();
    Ok(LeafFacts {
        subject: cert.subject().to_string(),
        names,
        not_before: v.not_before.to_datetime().into(),
        not_after: v.not_after.to_datetime().into(),
    })
}

/// A time for messages, e.g. `2026-12-02 04:30:00 UTC`.
pub fn show_time(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    t.format(&f).unwrap_or_else(|_| format!("{t}"))
}

/// `dir/public.crt` and `dir/private.key`, checked: dates against `now`, and the key against the
/// certificate.
pub fn load_pair(
    dir: &Path,
    provider: &CryptoProvider,
    now: SystemTime,
) -> Result<CertKey, TlsError> {
    let crt = dir.join(PUBLIC_CRT);
    let key_path = dir.join(PRIVATE_KEY);
    let chain = read_certs(&crt)?;
    let facts = leaf_facts(&crt, &chain[0])?;
    if now < facts.not_before {
        return Err(TlsError::NotYetValid {
            path: crt,
            not_before: show_time(facts.not_before),
        });
    }
    if now > facts.not_after {
        return Err(TlsError::Expired {
            path: crt,
            not_after: show_time(facts.not_after),
        });
    }
    let key = read_key(&key_path)?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::BadKey {
            path: key_path.clone(),
            reason: e.to_string(),
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(TlsError::Mismatch {
                cert: crt,
                key: key_path,
            })
        }
        Err(e) => {
            return Err(TlsError::BadCertificate {
                path: crt,
                reason: e.to_string(),
            })
        }
    }
    Ok(CertKey {
        certified: Arc::new(certified),
        path: crt,
        subject: facts.subject,
        names: facts.names,
        not_after: facts.not_after,
    })
}

/// Every CA certificate in `dir` (`*.crt` and `*.pem`, sorted by name); none if it is missing.
pub fn load_cas(dir: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(TlsError::Unreadable {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|x| x == "crt" || x == "pem" || x == "cer")
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        out.extend(read_certs(&f)?);
    }
    Ok(out)
}

/// A digest of every file [`load_dir`] reads (names and contents), to notice a change.
pub fn fingerprint(dir: &Path) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    let mut add = |p: &Path| {
        h.update(p.as_os_str().as_encoded_bytes());
        match std::fs::read(p) {
            Ok(b) => {
                h.update(&(b.len() as u64).to_be_bytes());
                h.update(&b);
            }
            Err(_) => {
                h.update(b"<absent>");
            }
        }
    };
    add(&dir.join(PUBLIC_CRT));
    add(&dir.join(PRIVATE_KEY));
    if let Ok(subs) = subdirs(dir) {
        for (name, sub) in subs {
            if name == CAS_DIR {
                let mut files: Vec<PathBuf> = std::fs::read_dir(&sub)
                    .map(|rd| rd.flatten().map(|e| e.path()).collect())
                    .unwrap_or_default();
                files.sort();
                for f in files {
                    add(&f);
                }
            } else {
                add(&sub.join(PUBLIC_CRT));
                add(&sub.join(PRIVATE_KEY));
            }
        }
    }
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{write, write_certs_dir, Ca, Validity};
    use std::time::Duration;

    fn ca() -> Ca {
        Ca::new("test CA", Validity::days(10)).unwrap()
    }

    fn err(dir: &Path) -> TlsError {
        load_dir(dir, SystemTime::now()).unwrap_err()
    }

    #[test]
    fn an_empty_or_missing_directory_means_no_tls() {
        let d = tempfile::tempdir().unwrap();
        assert!(load_dir(d.path(), SystemTime::now()).unwrap().is_none());
        assert!(load_dir(&d.path().join("nope"), SystemTime::now())
            .unwrap()
            .is_none());
    }

    #[test]
    fn every_broken_file_is_named_in_its_own_error() {
        let ca = ca();
        let leaf = ca.issue(&["localhost".into()], Validity::days(10)).unwrap();
        let other = ca.issue(&["localhost".into()], Validity::days(10)).unwrap();
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        write_certs_dir(dir, &leaf, &ca.pem().cert).unwrap();
        let set = load_dir(dir, SystemTime::now()).unwrap().unwrap();
        assert_eq!(set.default.names, ["localhost"]);

        // The key is missing.
        std::fs::remove_file(dir.join(PRIVATE_KEY)).unwrap();
        assert!(matches!(err(dir), TlsError::Missing { path } if path.ends_with(PRIVATE_KEY)));
        // The certificate is missing.
        write(&dir.join(PRIVATE_KEY), leaf.key.as_bytes(), true).unwrap();
        std::fs::remove_file(dir.join(PUBLIC_CRT)).unwrap();
        assert!(matches!(err(dir), TlsError::Missing { path } if path.ends_with(PUBLIC_CRT)));
        // A key in place of the certificate, a certificate in place of the key.
        write(&dir.join(PUBLIC_CRT), leaf.key.as_bytes(), false).unwrap();
        assert!(
            matches!(err(dir), TlsError::NoCertificate { .. }),
            "{}",
            err(dir)
        );
        write(&dir.join(PUBLIC_CRT), leaf.cert.as_bytes(), false).unwrap();
        write(&dir.join(PRIVATE_KEY), leaf.cert.as_bytes(), true).unwrap();
        assert!(matches!(err(dir), TlsError::NoKey { .. }), "{}", err(dir));
        // Another certificate's key.
        write(&dir.join(PRIVATE_KEY), other.key.as_bytes(), true).unwrap();
        let e = err(dir);
        assert!(matches!(e, TlsError::Mismatch { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("is not the private key of the certificate"),
            "{e}"
        );
        // Broken PEM.
        write(
            &dir.join(PUBLIC_CRT),
            b"-----BEGIN CERTIFICATE-----\nnot base64!\n",
            false,
        )
        .unwrap();
        assert!(matches!(err(dir), TlsError::BadPem { .. }), "{}", err(dir));
        // Unreadable: a directory where the file should be.
        std::fs::remove_file(dir.join(PUBLIC_CRT)).unwrap();
        std::fs::create_dir(dir.join(PUBLIC_CRT)).unwrap();
        assert!(
            matches!(err(dir), TlsError::Unreadable { .. }),
            "{}",
            err(dir)
        );
    }

    #[test]
    fn expired_and_future_certificates_are_refused_with_their_dates() {
        let ca = ca();
        let d = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let expired = ca
            .issue(
                &["localhost".into()],
                Validity {
                    not_before: now - Duration::from_secs(10 * 86_400),
                    not_after: now - Duration::from_secs(86_400),
                },
            )
            .unwrap();
        write_certs_dir(d.path(), &expired, &ca.pem().cert).unwrap();
        let e = err(d.path());
        assert!(matches!(e, TlsError::Expired { .. }), "{e}");
        assert!(e.to_string().contains("expired on"), "{e}");
        let future = ca
            .issue(
                &["localhost".into()],
                Validity {
                    not_before: now + Duration::from_secs(86_400),
                    not_after: now + Duration::from_secs(10 * 86_400),
                },
            )
            .unwrap();
        write_certs_dir(d.path(), &future, &ca.pem().cert).unwrap();
        assert!(matches!(err(d.path()), TlsError::NotYetValid { .. }));
    }

    #[test]
    fn sni_subdirectories_and_cas_are_read() {
        let ca = ca();
        let d = tempfile::tempdir().unwrap();
        let main = ca.issue(&["localhost".into()], Validity::days(5)).unwrap();
        let extra = ca
            .issue(&["*.example.test".into()], Validity::days(5))
            .unwrap();
        write_certs_dir(d.path(), &main, &ca.pem().cert).unwrap();
        write(
            &d.path().join("example.test").join(PUBLIC_CRT),
            extra.cert.as_bytes(),
            false,
        )
        .unwrap();
        write(
            &d.path().join("example.test").join(PRIVATE_KEY),
            extra.key.as_bytes(),
            true,
        )
        .unwrap();
        // A subdirectory with neither file is not a certificate.
        std::fs::create_dir(d.path().join("empty")).unwrap();
        let set = load_dir(d.path(), SystemTime::now()).unwrap().unwrap();
        assert_eq!(set.domains.len(), 1);
        assert_eq!(set.domains[0].0, "example.test");
        assert_eq!(set.cas.len(), 1);
        // A broken SNI certificate is an error too.
        std::fs::remove_file(d.path().join("example.test").join(PRIVATE_KEY)).unwrap();
        assert!(matches!(err(d.path()), TlsError::Missing { .. }));
    }
}
