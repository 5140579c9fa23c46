//! The signature of a browser POST upload (SigV4): `hex(HMAC(signing key, base64 policy))`, the
//! policy's base64 text being the string to sign. The credential scope is checked as for any
//! SigV4 request; the policy's own conditions (expiration, fields) are the handler's.

use super::v4::{self, AuthKind, Credential};
use super::{AuthConfig, Credentials};
use crate::error::{S3Error, S3ErrorCode};

/// Checks the `x-amz-signature` of a POST form over its `policy` field, signed by the key of
/// `x-amz-credential` for the day of `x-amz-date`. Returns the signer's credentials.
pub(crate) fn verify_post_signature(
    cfg: &AuthConfig,
    credential: &str,
    amz_date: &str,
    policy_b64: &str,
    signature: &str,
) -> Result<Credentials, S3Error> {
    if v4::parse_amz_date(amz_date).is_none() {
        return Err(S3Error::new(
            S3ErrorCode::InvalidArgument,
            format!("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"; got {amz_date:?}."),
        ));
    }
    let credential = Credential::parse(credential, AuthKind::Presigned)?;
    credential.check(AuthKind::Presigned, cfg, amz_date)?;
    let credentials = cfg
        .find(credential.access_key)
        .ok_or_else(|| S3Error::from_code(S3ErrorCode::InvalidAccessKeyId))?;
    let key = v4::signing_key(
        &credentials.secret_key,
        credential.date,
        credential.region,
        v4::SERVICE,
    );
    let computed = v4::hmac_sha256(&key, policy_b64.as_bytes());
    if v4::signature_matches(&computed, signature) {
        Ok(credentials)
    } else {
        Err(S3Error::from_code(S3ErrorCode::SignatureDoesNotMatch))
    }
}

/// Checks the `signature` of a SigV2 POST form (`AWSAccessKeyId`, `signature`, `policy`): the
/// base64 of HMAC-SHA1(secret key, the policy's base64 text), compared in constant time. Returns
/// the signer's credentials.
pub(crate) fn verify_post_signature_v2(
    cfg: &AuthConfig,
    access_key: &str,
    policy_b64: &str,
    signature: &str,
) -> Result<Credentials, S3Error> {
    let credentials = cfg
        .find(access_key)
        .ok_or_else(|| S3Error::from_code(S3ErrorCode::InvalidAccessKeyId))?;
    let computed = super::v2::hmac_sha1(credentials.secret_key.as_bytes(), policy_b64.as_bytes());
    if super::v2::signature_matches(&computed, signature) {
        Ok(credentials)
    } else {
        Err(S3Error::from_code(S3ErrorCode::SignatureDoesNotMatch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigv2_accepts_the_right_signature_only() {
        use base64::Engine as _;
        let cfg = cfg();
        let sign = |secret: &str, policy: &str| {
            base64::engine::general_purpose::STANDARD.encode(super::super::v2::hmac_sha1(
                secret.as_bytes(),
                policy.as_bytes(),
            ))
        };
        let sig = sign("SECRET", "cG9saWN5");
        let who = verify_post_signature_v2(&cfg, "AKID", "cG9saWN5", &sig).unwrap();
        assert_eq!(who.access_key, "AKID");
        for (ak, policy, sig) in [
            ("AKID", "b3RoZXI=", sig.clone()),
            ("AKID", "cG9saWN5", sign("WRONG", "cG9saWN5")),
            ("AKID", "cG9saWN5", "not base64!".to_owned()),
        ] {
            let err = verify_post_signature_v2(&cfg, ak, policy, &sig).unwrap_err();
            assert_eq!(err.code, S3ErrorCode::SignatureDoesNotMatch);
        }
        let err = verify_post_signature_v2(&cfg, "NOPE", "cG9saWN5", &sig).unwrap_err();
        assert_eq!(err.code, S3ErrorCode::InvalidAccessKeyId);
    }

    fn cfg() -> AuthConfig {
        AuthConfig::new(vec![Credentials::new("AKID", "SECRET")])
    }

    fn sign(secret: &str, date: &str, policy: &str) -> String {
        let key = v4::signing_key(secret, date, "us-east-1", "s3");
        hex::encode(v4::hmac_sha256(&key, policy.as_bytes()))
    }

    #[test]
    fn accepts_the_right_signature_only() {
        let cfg = cfg();
        let cred = "AKID/20260101/us-east-1/s3/aws4_request";
        let date = "20260101T000000Z";
        let sig = sign("SECRET", "20260101", "cG9saWN5");
        let who = verify_post_signature(&cfg, cred, date, "cG9saWN5", &sig).unwrap();
        assert_eq!(who.access_key, "AKID");

        let err = verify_post_signature(&cfg, cred, date, "b3RoZXI=", &sig).unwrap_err();
        assert_eq!(err.code, S3ErrorCode::SignatureDoesNotMatch);
        let bad = sign("WRONG", "20260101", "cG9saWN5");
        let err = verify_post_signature(&cfg, cred, date, "cG9saWN5", &bad).unwrap_err();
        assert_eq!(err.code, S3ErrorCode::SignatureDoesNotMatch);
        let err = verify_post_signature(
            &cfg,
            "NOPE/20260101/us-east-1/s3/aws4_request",
            date,
            "cG9saWN5",
            &sig,
        )
        .unwrap_err();
        assert_eq!(err.code, S3ErrorCode::InvalidAccessKeyId);
        // Scope date not the day of x-amz-date; wrong region; bad date.
        assert!(verify_post_signature(&cfg, cred, "20260102T000000Z", "cG9saWN5", &sig).is_err());
        assert!(verify_post_signature(
            &cfg,
            "AKID/20260101/eu-west-1/s3/aws4_request",
            date,
            "cG9saWN5",
            &sig
        )
        .is_err());
        assert!(verify_post_signature(&cfg, cred, "yesterday", "cG9saWN5", &sig).is_err());
    }
}
