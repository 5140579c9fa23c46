//! Sign-in sessions, held in this process's memory only.
//!
//! The browser holds a random 256-bit session id in an `HttpOnly; SameSite=Strict` cookie
//! (scripts cannot read it; no other site's page can send it) and a separate random CSRF token
//! that the page sends as `X-Quarry-Csrf` on every request that changes something. The
//! credentials stay here, beside the session, and sign the requests forwarded for it: the
//! secret never reaches the browser again after the sign-in form. A session ends at sign-out,
//! at its absolute expiry, or when the process restarts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::RngCore;
use subtle::ConstantTimeEq;

/// The name of the session cookie.
pub const COOKIE: &str = "quarry_console";

/// The credentials a session signs with: any that the S3 layer accepts (root, IAM users, STS
/// temporary credentials with their session token).
#[derive(Clone)]
pub struct SessionCredentials {
    pub access_key: String,
    pub secret_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for SessionCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCredentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    pub credentials: SessionCredentials,
    pub csrf: String,
    pub expires: Instant,
}

impl Session {
    /// Whether `sent` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, sent: &str) -> bool {
        bool::from(sent.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// Why a new session was not opened.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("too many console sessions are open ({0}); try again after some expire or sign out")]
    Full(usize),
}

/// The open sessions, by id.
#[derive(Debug)]
pub struct Sessions {
    ttl: Duration,
    max: usize,
    open: Mutex<HashMap<String, Session>>,
}

fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

impl Sessions {
    pub fn new(ttl: Duration, max: usize) -> Self {
        Sessions {
            ttl,
            max: max.max(1),
            open: Mutex::new(HashMap::new()),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session: its id (for the cookie) and the session.
    pub fn open(&self, credentials: SessionCredentials) -> Result<(String, Session), SessionError> {
        let now = Instant::now();
        let mut open = self.lock();
        if open.len() >= self.max {
            open.retain(|_, s| s.expires > now);
            if open.len() >= self.max {
                return Err(SessionError::Full(self.max));
            }
        }
        let id = random_hex();
        let session = Session {
            credentials,
            csrf: random_hex(),
            expires: now + self.ttl,
        };
        open.insert(id.clone(), session.clone());
        Ok((id, session))
    }

    /// The live session of this id; an expired one is removed.
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut open = self.lock();
        match open.get(id) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                open.remove(id);
                None
            }
            None => None,
        }
    }

    pub fn close(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }
}

/// The session id in a request's `Cookie` headers.
pub fn cookie_id(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value that stores `id` for `ttl` (or clears it with `None`).
pub fn set_cookie(id: Option<&str>, ttl: Duration, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    match id {
        Some(id) => format!(
            "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
            ttl.as_secs()
        ),
        None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> SessionCredentials {
        SessionCredentials {
            access_key: "AK".into(),
            secret_key: "very-secret".into(),
            session_token: None,
        }
    }

    #[test]
    fn sessions_expire_close_and_are_bounded() {
        let s = Sessions::new(Duration::from_millis(50), 2);
        let (a, sa) = s.open(creds()).unwrap();
        assert_eq!(a.len(), 64);
        assert!(s.get(&a).is_some());
        assert!(sa.csrf_matches(&sa.csrf));
        assert!(!sa.csrf_matches("nope"));
        let (b, _) = s.open(creds()).unwrap();
        assert!(matches!(s.open(creds()), Err(SessionError::Full(2))));
        assert!(s.close(&b));
        assert!(s.get(&b).is_none());
        std::thread::sleep(Duration::from_millis(60));
        assert!(s.get(&a).is_none(), "expired");
        // Expired sessions make room.
        s.open(creds()).unwrap();
        s.open(creds()).unwrap();
    }

    #[test]
    fn the_secret_is_not_in_debug_output() {
        let d = format!("{:?}", creds());
        assert!(!d.contains("very-secret"), "{d}");
    }

    #[test]
    fn cookie_round_trip() {
        let id = "ab".repeat(32);
        let v = set_cookie(Some(&id), Duration::from_secs(60), true);
        assert!(v.contains("HttpOnly") && v.contains("SameSite=Strict") && v.contains("Secure"));
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::COOKIE,
            format!("other=1; {COOKIE}={id}").parse().unwrap(),
        );
        assert_eq!(cookie_id(&h).as_deref(), Some(id.as_str()));
        h.insert(
            http::header::COOKIE,
            format!("{COOKIE}=short").parse().unwrap(),
        );
        assert_eq!(cookie_id(&h), None);
    }
}
