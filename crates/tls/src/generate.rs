//! Trial certificates: a CA of one's own and certificates it signs, in the layout the server
//! reads (`quarry admin cert generate`). ECDSA P-256 keys, made with rcgen.
//!
//! Every certificate made here can serve and connect (server and client authentication), so one
//! per node covers both its S3 listener and internode mutual TLS.

use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use crate::certs::{CAS_DIR, PRIVATE_KEY, PUBLIC_CRT};
use crate::TlsError;

/// The CA's file names in its directory.
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";

fn gen_err(e: rcgen::Error) -> TlsError {
    TlsError::Generate(e.to_string())
}

/// A certificate and its key, PEM.
#[derive(Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pem").field("key", &"<redacted>").finish()
    }
}

/// When a certificate is valid.
#[derive(Debug, Clone, Copy)]
pub struct Validity {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Validity {
    /// From an hour ago (clock skew) for `days` days.
    pub fn days(days: u32) -> Validity {
        let now = SystemTime::now();
        Validity {
            not_before: now - Duration::from_secs(3600),
            not_after: now + Duration::from_secs(u64::from(days) * 86_400),
        }
    }
}

/// A certificate authority that signs node certificates.
pub struct Ca {
    pem: Pem,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// A new self-signed CA named `common_name`.
    pub fn new(common_name: &str, validity: Validity) -> Result<Ca, TlsError> {
        let key = KeyPair::generate().map_err(gen_err)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        dn.push(DnType::OrganizationName, "Quarry");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = validity.not_before.into();
        params.not_after = validity.not_after.into();
        let cert = params.self_signed(&key).map_err(gen_err)?;
        let pem = Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        };
        Ok(Ca {
            pem,
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA from its certificate and key (PEM).
    pub fn from_pem(cert: &str, key: &str) -> Result<Ca, TlsError> {
        let kp = KeyPair::from_pem(key).map_err(gen_err)?;
        let issuer = Issuer::from_ca_cert_pem(cert, kp).map_err(gen_err)?;
        Ok(Ca {
            pem: Pem {
                cert: cert.to_owned(),
                key: key.to_owned(),
            },
            issuer,
        })
    }

    /// The CA's certificate and key.
    pub fn pem(&self) -> &Pem {
        &self.pem
    }

    /// A certificate for `names` (DNS names or IP addresses; the first is also the common
    /// name), for serving and for connecting, signed by this CA.
    pub fn issue(&self, names: &[String], validity: Validity) -> Result<Pem, TlsError> {
        if names.is_empty() {
            return Err(TlsError::Generate(
                "a certificate needs at least one name (a host name or an IP address)".into(),
            ));
        }
        let key = KeyPair::generate().map_err(gen_err)?;
        let mut params = CertificateParams::new(names.to_vec()).map_err(gen_err)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, names[0].as_str());
        dn.push(DnType::OrganizationName, "Quarry");
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        params.not_before = validity.not_before.into();
        params.not_after = validity.not_after.into();
        let cert = params.signed_by(&key, &self.issuer).map_err(gen_err)?;
        Ok(Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    /// Reads the CA in `dir` (`ca.crt`, `ca.key`), or makes one there if it has none. True when
    /// it was made.
    pub fn load_or_create(dir: &Path, validity: Validity) -> Result<(Ca, bool), TlsError> {
        let (crt, key) = (dir.join(CA_CRT), dir.join(CA_KEY));
        if crt.exists() || key.exists() {
            let read = |p: &Path| {
                std::fs::read_to_string(p).map_err(|source| TlsError::Unreadable {
                    path: p.to_path_buf(),
                    source,
                })
            };
            return Ok((Ca::from_pem(&read(&crt)?, &read(&key)?)?, false));
        }
        let ca = Ca::new("Quarry CA", validity)?;
        write(&crt, ca.pem.cert.as_bytes(), false)?;
        write(&key, ca.pem.key.as_bytes(), true)?;
        Ok((ca, true))
    }
}

/// Writes a certificate directory the server reads: `public.crt`, `private.key` (mode 0600) and
/// the CA's certificate as `CAs/ca.crt`.
pub fn write_certs_dir(dir: &Path, leaf: &Pem, ca_cert: &str) -> Result<(), TlsError> {
    write(&dir.join(PUBLIC_CRT), leaf.cert.as_bytes(), false)?;
    write(&dir.join(PRIVATE_KEY), leaf.key.as_bytes(), true)?;
    write(&dir.join(CAS_DIR).join(CA_CRT), ca_cert.as_bytes(), false)?;
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file and a rename (a server watching the
/// directory never reads half a file), readable by the owner only when `private`.
pub fn write(path: &Path, bytes: &[u8], private: bool) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    let tmp = path.with_extension("tmp-quarry");
    {
        use std::io::Write;
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.mode(if private { 0o600 } else { 0o644 });
        }
        let mut f = o.open(&tmp).map_err(err)?;
        f.write_all(bytes).map_err(err)?;
        f.sync_all().map_err(err)?;
    }
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::load_dir;

    #[test]
    fn a_generated_directory_loads_and_a_reloaded_ca_signs_the_same_way() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, made) = Ca::load_or_create(&dir.path().join("ca"), Validity::days(30)).unwrap();
        assert!(made);
        let leaf = ca
            .issue(&["node1".into(), "127.0.0.1".into()], Validity::days(30))
            .unwrap();
        let certs = dir.path().join("certs");
        write_certs_dir(&certs, &leaf, &ca.pem().cert).unwrap();
        let set = load_dir(&certs, SystemTime::now()).unwrap().unwrap();
        assert_eq!(set.default.names, ["node1", "127.0.0.1"]);
        assert_eq!(set.cas.len(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(certs.join(PRIVATE_KEY))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // The same CA, read back, signs another node.
        let (again, made) = Ca::load_or_create(&dir.path().join("ca"), Validity::days(30)).unwrap();
        assert!(!made);
        let other = again.issue(&["node2".into()], Validity::days(30)).unwrap();
        let d2 = dir.path().join("certs2");
        write_certs_dir(&d2, &other, &again.pem().cert).unwrap();
        assert!(load_dir(&d2, SystemTime::now()).unwrap().is_some());
        assert!(ca.issue(&[], Validity::days(1)).is_err());
    }
}
