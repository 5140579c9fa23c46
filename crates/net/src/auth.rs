//! The connection handshake: mutual proof of the cluster secret and the session keys.
//!
//! Nothing is served on an internode connection before this handshake succeeds.
//!
//! ```text
//! client                                             server
//!   Hello{client, deployment, node, nonce_c, time} ->
//!                                                    <- Hello{server, deployment, node, nonce_s, time}
//!   Proof{HMAC(secret, "client proof" || H(T))}    ->
//!                                                    <- Proof{HMAC(secret, "server proof" || H(T))}
//!                                                       or Reject{reason}
//! ```
//!
//! `T` is the transcript: the exact bytes of both hellos. The client proves first, so a connector that
//! does not know the secret learns nothing from the server but a nonce (no offline guessing oracle).
//! Replaying a recorded client proof fails because the server's nonce is fresh; a hello whose clock is
//! more than the configured skew away from ours is refused as stale. The per-direction session keys are
//! `HKDF-SHA256(salt = nonce_c || nonce_s, ikm = secret, info = label || H(T))`.
//!
//! Messages are `magic "QHSK" | version (2) | type (1) | body length (u16 BE) | body`. The version is
//! the internode protocol's as a whole ([`HS_VERSION`]): the messages served after the handshake
//! (drive, lock, verbs and node-info requests, [`crate::codec`]) change with it, so two nodes of
//! different versions never get past the handshake. The magic and this header's layout are the one
//! fixed point of every version: a node refuses a peer of another version with a message the peer
//! can read (its header's version is ours, which the peer then names) and logs which version the
//! peer speaks. A node id is
//! at most 255 bytes of printable ASCII without spaces (it is logged, so nothing else is accepted). Like
//! [`crate::wire`], the messages and the two state machines below are pure (the clock and the nonce are
//! parameters); [`client_handshake`] and [`server_handshake`] drive them over a stream.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use uuid::Uuid;

use crate::wire::{Opener, Sealer};

pub const HS_MAGIC: [u8; 4] = *b"QHSK";
/// The internode protocol version this node speaks: 1 until the one internode codec, 2 with it
/// (every message's byte order and string framing changed), 3 since frame answers (a shard
/// read's bulk frame whose tag covers the bitrot frame's hash only: [`crate::data`]), 4 since
/// object metadata travels in the codec's layout (drive protocol 3), 5 since walk answers, a
/// key's versions and a drive's uploads come in pages bounded in bytes (drive protocol 4).
pub const HS_VERSION: u8 = 5;
/// Bytes before a handshake message's body.
pub const HS_HEADER_LEN: usize = 8;
/// Largest body of any handshake message (a hello with a 255-byte node id).
pub const HS_MAX_BODY: usize = 1 + 16 + 32 + 8 + 1 + 255;
/// Shortest cluster secret accepted.
pub const MIN_SECRET_LEN: usize = 16;
/// Default bound on the difference between two nodes' clocks.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(60);

const LABEL_CLIENT_PROOF: &[u8] = b"quarry-net/1 client proof";
const LABEL_SERVER_PROOF: &[u8] = b"quarry-net/1 server proof";
const LABEL_SESSION: &[u8] = b"quarry-net/1 session keys";

type HmacSha256 = Hmac<Sha256>;

/// The secret shared by all nodes of a cluster. Its bytes are never printed.
#[derive(Clone)]
pub struct ClusterSecret(Arc<[u8]>);

impl ClusterSecret {
    pub fn new(bytes: impl AsRef<[u8]>) -> Result<ClusterSecret, AuthError> {
        let bytes = bytes.as_ref();
        if bytes.len() < MIN_SECRET_LEN {
            return Err(AuthError::WeakSecret { len: bytes.len() });
        }
        Ok(ClusterSecret(bytes.into()))
    }

    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

/// Who this node is, as told to its peers, and the secret it proves.
#[derive(Debug, Clone)]
pub struct Identity {
    pub deployment_id: Uuid,
    /// A short name for logs and errors (at most 255 bytes), e.g. the node's endpoint.
    pub node_id: String,
    pub secret: ClusterSecret,
}

/// Which end of a connection a hello comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    Client = 1,
    Server = 2,
}

/// Why a server refused a handshake, as sent to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RejectReason {
    /// The client belongs to another deployment.
    DeploymentMismatch = 1,
    /// The client's clock is too far from the server's (or the hello is stale).
    ClockSkew = 2,
    /// The client's proof is wrong: it does not know the cluster secret.
    BadProof = 3,
    /// A message could not be parsed, or came out of order.
    Malformed = 4,
    /// The client speaks another internode protocol version ([`HS_VERSION`]).
    UnsupportedVersion = 5,
    /// Any reason this version does not know.
    Other = 255,
}

impl RejectReason {
    fn from_u8(b: u8) -> RejectReason {
        match b {
            1 => RejectReason::DeploymentMismatch,
            2 => RejectReason::ClockSkew,
            3 => RejectReason::BadProof,
            4 => RejectReason::Malformed,
            5 => RejectReason::UnsupportedVersion,
            _ => RejectReason::Other,
        }
    }
}

/// Every way a handshake can fail.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cluster secret is {len} bytes; at least {MIN_SECRET_LEN} are required")]
    WeakSecret { len: usize },
    #[error("node id is {len} bytes; at most 255 are allowed")]
    NodeIdTooLong { len: usize },
    #[error("node id {0:?} has characters other than printable ASCII (no spaces)")]
    NodeIdNotPrintable(String),
    #[error("bad handshake magic {0:02x?}: the peer is not a Quarry node")]
    BadMagic([u8; 4]),
    #[error("the peer speaks internode protocol version {got}, this node version {HS_VERSION}: every node of a cluster must run a Quarry of the same protocol version (upgrade them together)")]
    UnsupportedVersion { got: u8 },
    #[error("malformed handshake message: {0}")]
    Malformed(&'static str),
    #[error("truncated handshake message: {have} of {need} bytes")]
    Truncated { need: usize, have: usize },
    #[error("unexpected handshake message: expected {expected}, got {got}")]
    Unexpected {
        expected: &'static str,
        got: &'static str,
    },
    #[error("peer {peer:?} belongs to deployment {theirs}, this node to {ours}")]
    DeploymentMismatch {
        ours: Uuid,
        theirs: Uuid,
        peer: String,
    },
    #[error("peer clock differs from ours by {skew_ms} ms (at most {max_ms} ms allowed): stale or replayed handshake, or unsynchronised clocks")]
    ClockSkew { skew_ms: u64, max_ms: u64 },
    #[error("peer's handshake proof is wrong: it does not know the cluster secret")]
    BadProof,
    #[error("peer refused the handshake: {0:?}")]
    Rejected(RejectReason),
    #[error("handshake i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl AuthError {
    /// What the server tells the client before closing, if anything.
    pub fn reject_reason(&self) -> Option<RejectReason> {
        match self {
            AuthError::DeploymentMismatch { .. } => Some(RejectReason::DeploymentMismatch),
            AuthError::ClockSkew { .. } => Some(RejectReason::ClockSkew),
            AuthError::BadProof => Some(RejectReason::BadProof),
            AuthError::UnsupportedVersion { .. } => Some(RejectReason::UnsupportedVersion),
            AuthError::Malformed(_)
            | AuthError::Truncated { .. }
            | AuthError::Unexpected { .. } => Some(RejectReason::Malformed),
            // Not a Quarry peer, or the connection is gone: say nothing.
            _ => None,
        }
    }
}

/// A hello: who is speaking, its nonce and its clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub role: Role,
    pub deployment_id: Uuid,
    pub nonce: [u8; 32],
    pub timestamp_ms: u64,
    pub node_id: String,
}

/// One handshake message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Hello(Hello),
    Proof([u8; 32]),
    Reject(RejectReason),
}

impl Message {
    fn name(&self) -> &'static str {
        match self {
            Message::Hello(_) => "hello",
            Message::Proof(_) => "proof",
            Message::Reject(_) => "reject",
        }
    }
}

const T_HELLO: u8 = 1;
const T_PROOF: u8 = 2;
const T_REJECT: u8 = 3;

/// The bytes of `msg`. A node id longer than 255 bytes is cut (checked earlier by the state machines).
pub fn encode_message(msg: &Message) -> Vec<u8> {
    let mut body = Vec::with_capacity(HS_MAX_BODY);
    let t = match msg {
        Message::Hello(h) => {
            body.put_u8(h.role as u8);
            body.put_slice(h.deployment_id.as_bytes());
            body.put_slice(&h.nonce);
            body.put_u64(h.timestamp_ms);
            let id = &h.node_id.as_bytes()[..h.node_id.len().min(255)];
            body.put_u8(id.len() as u8);
            body.put_slice(id);
            T_HELLO
        }
        Message::Proof(mac) => {
            body.put_slice(mac);
            T_PROOF
        }
        Message::Reject(r) => {
            body.put_u8(*r as u8);
            T_REJECT
        }
    };
    let mut out = Vec::with_capacity(HS_HEADER_LEN + body.len());
    out.put_slice(&HS_MAGIC);
    out.put_u8(HS_VERSION);
    out.put_u8(t);
    out.put_u16(body.len() as u16);
    out.extend_from_slice(&body);
    out
}

/// Checks a message header and returns its body length.
pub fn decode_header(buf: &[u8]) -> Result<usize, AuthError> {
    if buf.len() < HS_HEADER_LEN {
        return Err(AuthError::Truncated {
            need: HS_HEADER_LEN,
            have: buf.len(),
        });
    }
    let mut magic = [0u8; 4];
    magic.copy_from_slice(&buf[..4]);
    if magic != HS_MAGIC {
        return Err(AuthError::BadMagic(magic));
    }
    if buf[4] != HS_VERSION {
        return Err(AuthError::UnsupportedVersion { got: buf[4] });
    }
    let len = u16::from_be_bytes([buf[6], buf[7]]) as usize;
    if len > HS_MAX_BODY {
        return Err(AuthError::Malformed(
            "message longer than any handshake message",
        ));
    }
    Ok(len)
}

/// Decodes exactly one message from `buf`.
pub fn decode_message(buf: &[u8]) -> Result<Message, AuthError> {
    let len = decode_header(buf)?;
    let need = HS_HEADER_LEN + len;
    if buf.len() < need {
        return Err(AuthError::Truncated {
            need,
            have: buf.len(),
        });
    }
    if buf.len() > need {
        return Err(AuthError::Malformed("trailing bytes after message"));
    }
    let mut b = &buf[HS_HEADER_LEN..];
    match buf[5] {
        T_HELLO => {
            if b.len() < 1 + 16 + 32 + 8 + 1 {
                return Err(AuthError::Malformed("short hello"));
            }
            let role = match b.get_u8() {
                1 => Role::Client,
                2 => Role::Server,
                _ => return Err(AuthError::Malformed("unknown role")),
            };
            let mut id = [0u8; 16];
            b.copy_to_slice(&mut id);
            let mut nonce = [0u8; 32];
            b.copy_to_slice(&mut nonce);
            let timestamp_ms = b.get_u64();
            let n = b.get_u8() as usize;
            if b.len() != n {
                return Err(AuthError::Malformed(
                    "node id length does not match the message",
                ));
            }
            // The node id ends up in logs: bytes that could forge or garble a line are refused
            // here, before anything else sees them.
            if !b.iter().all(u8::is_ascii_graphic) {
                return Err(AuthError::Malformed(
                    "node id has characters other than printable ASCII",
                ));
            }
            let node_id = std::str::from_utf8(b)
                .map_err(|_| AuthError::Malformed("node id is not UTF-8"))?
                .to_owned();
            Ok(Message::Hello(Hello {
                role,
                deployment_id: Uuid::from_bytes(id),
                nonce,
                timestamp_ms,
                node_id,
            }))
        }
        T_PROOF => {
            let mac: [u8; 32] = b
                .try_into()
                .map_err(|_| AuthError::Malformed("proof is not 32 bytes"))?;
            Ok(Message::Proof(mac))
        }
        T_REJECT => match b {
            [r] => Ok(Message::Reject(RejectReason::from_u8(*r))),
            _ => Err(AuthError::Malformed("reject is not 1 byte")),
        },
        _ => Err(AuthError::Malformed("unknown message type")),
    }
}

/// The keys and peer facts of an authenticated connection.
pub struct Session {
    pub peer_node_id: String,
    pub peer_deployment_id: Uuid,
    /// Key of the frames this side sends.
    pub send_key: [u8; 32],
    /// Key of the frames this side receives.
    pub recv_key: [u8; 32],
}

impl Session {
    pub fn sealer(&self, max_payload: u32) -> Sealer {
        Sealer::new(&self.send_key, max_payload)
    }

    pub fn opener(&self, max_payload: u32) -> Opener {
        Opener::new(&self.recv_key, max_payload)
    }

    /// The sender of bulk frames ([`crate::data`]) of this side, keyed apart from the control frames.
    pub fn bulk_sender(&self) -> crate::data::BulkSender {
        crate::data::BulkSender::new(crate::data::bulk_key(&self.send_key))
    }

    /// The receiver of the peer's bulk frames.
    pub fn bulk_receiver(&self) -> crate::data::BulkReceiver {
        crate::data::BulkReceiver::new(crate::data::bulk_key(&self.recv_key))
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("peer_node_id", &self.peer_node_id)
            .field("peer_deployment_id", &self.peer_deployment_id)
            .finish_non_exhaustive()
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

fn verify(key: &[u8], parts: &[&[u8]], tag: &[u8; 32]) -> Result<(), AuthError> {
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    for p in parts {
        mac.update(p);
    }
    // Constant-time comparison.
    mac.verify_slice(tag).map_err(|_| AuthError::BadProof)
}

/// HKDF-SHA256 (RFC 5869) with a 64-byte output.
pub fn hkdf_sha256_64(salt: &[u8], ikm: &[u8], info: &[&[u8]]) -> [u8; 64] {
    let prk = hmac(salt, &[ikm]);
    let mut out = [0u8; 64];
    let mut parts: Vec<&[u8]> = info.to_vec();
    parts.push(&[1]);
    let t1 = hmac(&prk, &parts);
    let mut parts: Vec<&[u8]> = vec![&t1];
    parts.extend_from_slice(info);
    parts.push(&[2]);
    let t2 = hmac(&prk, &parts);
    out[..32].copy_from_slice(&t1);
    out[32..].copy_from_slice(&t2);
    out
}

fn transcript_hash(client_hello: &[u8], server_hello: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(client_hello);
    h.update(server_hello);
    h.finalize().into()
}

fn session_keys(
    secret: &ClusterSecret,
    nonce_c: &[u8; 32],
    nonce_s: &[u8; 32],
    th: &[u8; 32],
) -> ([u8; 32], [u8; 32]) {
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(nonce_c);
    salt[32..].copy_from_slice(nonce_s);
    let okm = hkdf_sha256_64(&salt, secret.bytes(), &[LABEL_SESSION, th]);
    let mut c2s = [0u8; 32];
    let mut s2c = [0u8; 32];
    c2s.copy_from_slice(&okm[..32]);
    s2c.copy_from_slice(&okm[32..]);
    (c2s, s2c)
}

fn check_skew(theirs_ms: u64, now_ms: u64, max_skew: Duration) -> Result<(), AuthError> {
    let skew_ms = theirs_ms.abs_diff(now_ms);
    let max_ms = max_skew.as_millis().min(u64::MAX as u128) as u64;
    if skew_ms > max_ms {
        return Err(AuthError::ClockSkew { skew_ms, max_ms });
    }
    Ok(())
}

fn check_node_id(identity: &Identity) -> Result<(), AuthError> {
    if identity.node_id.len() > 255 {
        return Err(AuthError::NodeIdTooLong {
            len: identity.node_id.len(),
        });
    }
    if !identity.node_id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(AuthError::NodeIdNotPrintable(identity.node_id.clone()));
    }
    Ok(())
}

fn expect_hello(msg: Message, role: Role) -> Result<Hello, AuthError> {
    match msg {
        Message::Hello(h) if h.role == role => Ok(h),
        // A hello of our own role would be our own message reflected back.
        Message::Hello(_) => Err(AuthError::Malformed("hello from the wrong role")),
        Message::Reject(r) => Err(AuthError::Rejected(r)),
        other => Err(AuthError::Unexpected {
            expected: "hello",
            got: other.name(),
        }),
    }
}

/// Client state after sending its hello.
pub struct ClientStart {
    identity: Identity,
    hello: Hello,
    hello_bytes: Vec<u8>,
    max_skew: Duration,
}

/// Client state after sending its proof.
pub struct ClientAwaitFinish {
    th: [u8; 32],
    secret: ClusterSecret,
    session: Session,
}

impl ClientStart {
    /// Starts a handshake; returns the state and the hello to send.
    pub fn new(
        identity: &Identity,
        nonce: [u8; 32],
        now_ms: u64,
        max_skew: Duration,
    ) -> Result<(ClientStart, Vec<u8>), AuthError> {
        check_node_id(identity)?;
        let hello = Hello {
            role: Role::Client,
            deployment_id: identity.deployment_id,
            nonce,
            timestamp_ms: now_ms,
            node_id: identity.node_id.clone(),
        };
        let hello_bytes = encode_message(&Message::Hello(hello.clone()));
        let out = hello_bytes.clone();
        Ok((
            ClientStart {
                identity: identity.clone(),
                hello,
                hello_bytes,
                max_skew,
            },
            out,
        ))
    }

    /// Takes the server's hello; returns the state and the proof to send.
    pub fn on_server_hello(
        self,
        msg: &[u8],
        now_ms: u64,
    ) -> Result<(ClientAwaitFinish, Vec<u8>), AuthError> {
        let server = expect_hello(decode_message(msg)?, Role::Server)?;
        if server.deployment_id != self.identity.deployment_id {
            return Err(AuthError::DeploymentMismatch {
                ours: self.identity.deployment_id,
                theirs: server.deployment_id,
                peer: server.node_id,
            });
        }
        check_skew(server.timestamp_ms, now_ms, self.max_skew)?;
        let th = transcript_hash(&self.hello_bytes, msg);
        let secret = self.identity.secret.clone();
        let proof = hmac(secret.bytes(), &[LABEL_CLIENT_PROOF, &th]);
        let (c2s, s2c) = session_keys(&secret, &self.hello.nonce, &server.nonce, &th);
        let session = Session {
            peer_node_id: server.node_id,
            peer_deployment_id: server.deployment_id,
            send_key: c2s,
            recv_key: s2c,
        };
        Ok((
            ClientAwaitFinish {
                th,
                secret,
                session,
            },
            encode_message(&Message::Proof(proof)),
        ))
    }
}

impl ClientAwaitFinish {
    /// Takes the server's proof (or refusal); returns the session.
    pub fn on_server_finish(self, msg: &[u8]) -> Result<Session, AuthError> {
        match decode_message(msg)? {
            Message::Proof(p) => {
                verify(self.secret.bytes(), &[LABEL_SERVER_PROOF, &self.th], &p)?;
                Ok(self.session)
            }
            Message::Reject(r) => Err(AuthError::Rejected(r)),
            other => Err(AuthError::Unexpected {
                expected: "proof",
                got: other.name(),
            }),
        }
    }
}

/// Server state after sending its hello.
pub struct ServerAwaitProof {
    th: [u8; 32],
    secret: ClusterSecret,
    session: Session,
}

/// Takes a client's hello; returns the server's state and the hello to send back.
pub fn server_on_client_hello(
    identity: &Identity,
    nonce: [u8; 32],
    now_ms: u64,
    max_skew: Duration,
    msg: &[u8],
) -> Result<(ServerAwaitProof, Vec<u8>), AuthError> {
    check_node_id(identity)?;
    let client = expect_hello(decode_message(msg)?, Role::Client)?;
    if client.deployment_id != identity.deployment_id {
        return Err(AuthError::DeploymentMismatch {
            ours: identity.deployment_id,
            theirs: client.deployment_id,
            peer: client.node_id,
        });
    }
    check_skew(client.timestamp_ms, now_ms, max_skew)?;
    let hello = encode_message(&Message::Hello(Hello {
        role: Role::Server,
        deployment_id: identity.deployment_id,
        nonce,
        timestamp_ms: now_ms,
        node_id: identity.node_id.clone(),
    }));
    let th = transcript_hash(msg, &hello);
    let (c2s, s2c) = session_keys(&identity.secret, &client.nonce, &nonce, &th);
    let session = Session {
        peer_node_id: client.node_id,
        peer_deployment_id: client.deployment_id,
        send_key: s2c,
        recv_key: c2s,
    };
    Ok((
        ServerAwaitProof {
            th,
            secret: identity.secret.clone(),
            session,
        },
        hello,
    ))
}

impl ServerAwaitProof {
    /// Takes the client's proof; returns the session and the server's proof to send.
    pub fn on_client_proof(self, msg: &[u8]) -> Result<(Session, Vec<u8>), AuthError> {
        match decode_message(msg)? {
            Message::Proof(p) => {
                verify(self.secret.bytes(), &[LABEL_CLIENT_PROOF, &self.th], &p)?;
                let proof = hmac(self.secret.bytes(), &[LABEL_SERVER_PROOF, &self.th]);
                Ok((self.session, encode_message(&Message::Proof(proof))))
            }
            other => Err(AuthError::Unexpected {
                expected: "proof",
                got: other.name(),
            }),
        }
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn fresh_nonce() -> [u8; 32] {
    use rand::RngCore;
    let mut n = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

async fn read_message<S: AsyncRead + Unpin>(s: &mut S) -> Result<Vec<u8>, AuthError> {
    let mut buf = vec![0u8; HS_HEADER_LEN];
    s.read_exact(&mut buf).await?;
    let len = match decode_header(&buf) {
        Ok(len) => len,
        Err(e @ AuthError::UnsupportedVersion { .. }) => {
            // Every version has this header: read the peer's message to its end, so that the
            // refusal sent next reaches it (closing with its bytes unread would reset the
            // connection and drop the refusal).
            let len = u16::from_be_bytes([buf[6], buf[7]]) as usize;
            if len <= HS_MAX_BODY {
                buf.resize(HS_HEADER_LEN + len, 0);
                s.read_exact(&mut buf[HS_HEADER_LEN..]).await?;
            }
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    buf.resize(HS_HEADER_LEN + len, 0);
    s.read_exact(&mut buf[HS_HEADER_LEN..]).await?;
    Ok(buf)
}

/// Runs the client side of the handshake on `stream`. The caller bounds it with a timeout.
pub async fn client_handshake<S>(
    stream: &mut S,
    identity: &Identity,
    max_skew: Duration,
) -> Result<Session, AuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (state, hello) = ClientStart::new(identity, fresh_nonce(), now_ms(), max_skew)?;
    stream.write_all(&hello).await?;
    stream.flush().await?;
    let server_hello = read_message(stream).await?;
    let (state, proof) = state.on_server_hello(&server_hello, now_ms())?;
    stream.write_all(&proof).await?;
    stream.flush().await?;
    let finish = read_message(stream).await?;
    state.on_server_finish(&finish)
}

/// Runs the server side of the handshake on `stream`; on failure tells the client why (when it is a
/// Quarry peer) before returning the error. The caller bounds it with a timeout.
pub async fn server_handshake<S>(
    stream: &mut S,
    identity: &Identity,
    max_skew: Duration,
) -> Result<Session, AuthError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let result: Result<Session, AuthError> = async {
        let client_hello = read_message(stream).await?;
        let (state, hello) =
            server_on_client_hello(identity, fresh_nonce(), now_ms(), max_skew, &client_hello)?;
        stream.write_all(&hello).await?;
        stream.flush().await?;
        let proof = read_message(stream).await?;
        let (session, finish) = state.on_client_proof(&proof)?;
        stream.write_all(&finish).await?;
        stream.flush().await?;
        Ok(session)
    }
    .await;
    if let Err(e) = &result {
        if let Some(reason) = e.reject_reason() {
            let _ = stream
                .write_all(&encode_message(&Message::Reject(reason)))
                .await;
            let _ = stream.flush().await;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn identity(secret: &[u8], node: &str) -> Identity {
        Identity {
            deployment_id: Uuid::from_u128(0x1234),
            node_id: node.into(),
            secret: ClusterSecret::new(secret).unwrap(),
        }
    }

    const SKEW: Duration = Duration::from_secs(60);
    const T0: u64 = 1_800_000_000_000;

    /// Runs a whole handshake in memory; returns both sessions or the first error (and who saw it).
    fn run(
        client: &Identity,
        server: &Identity,
        client_now: u64,
        server_now: u64,
    ) -> Result<(Session, Session), (&'static str, AuthError)> {
        let (c, hello) =
            ClientStart::new(client, [1; 32], client_now, SKEW).map_err(|e| ("client", e))?;
        let (s, shello) = server_on_client_hello(server, [2; 32], server_now, SKEW, &hello)
            .map_err(|e| ("server", e))?;
        let (c, proof) = c
            .on_server_hello(&shello, client_now)
            .map_err(|e| ("client", e))?;
        let (ss, finish) = s.on_client_proof(&proof).map_err(|e| ("server", e))?;
        let cs = c.on_server_finish(&finish).map_err(|e| ("client", e))?;
        Ok((cs, ss))
    }

    #[test]
    fn hkdf_matches_rfc5869_case_1() {
        let ikm = [0x0bu8; 22];
        let salt: Vec<u8> = (0u8..=0x0c).collect();
        let info: Vec<u8> = (0xf0u8..=0xf9).collect();
        let okm = hkdf_sha256_64(&salt, &ikm, &[&info]);
        let expected =
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865";
        let got: String = okm[..42].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn same_secret_agrees_on_keys() {
        let a = identity(b"0123456789abcdef-secret", "a");
        let b = identity(b"0123456789abcdef-secret", "b");
        let (c, s) = run(&a, &b, T0, T0 + 500).unwrap();
        assert_eq!(c.send_key, s.recv_key);
        assert_eq!(c.recv_key, s.send_key);
        assert_ne!(c.send_key, c.recv_key, "directions have distinct keys");
        assert_eq!(c.peer_node_id, "b");
        assert_eq!(s.peer_node_id, "a");
    }

    #[test]
    fn wrong_secret_is_refused_by_the_server() {
        let a = identity(b"0123456789abcdef-secret", "a");
        let b = identity(b"0123456789abcdef-SECRET", "b");
        let (who, e) = run(&a, &b, T0, T0).unwrap_err();
        assert_eq!(who, "server");
        assert!(matches!(e, AuthError::BadProof));
        assert_eq!(e.reject_reason(), Some(RejectReason::BadProof));
    }

    #[test]
    fn a_server_without_the_secret_is_refused_by_the_client() {
        // A server that lets any proof through still cannot produce its own.
        let a = identity(b"0123456789abcdef-secret", "a");
        let b = identity(b"0123456789abcdef-SECRET", "b");
        let (c, hello) = ClientStart::new(&a, [1; 32], T0, SKEW).unwrap();
        let (_s, shello) = server_on_client_hello(&b, [2; 32], T0, SKEW, &hello).unwrap();
        let (c, _proof) = c.on_server_hello(&shello, T0).unwrap();
        let forged = encode_message(&Message::Proof([9; 32]));
        assert!(matches!(
            c.on_server_finish(&forged),
            Err(AuthError::BadProof)
        ));
    }

    #[test]
    fn stale_handshake_and_skew_are_refused() {
        let a = identity(b"0123456789abcdef-secret", "a");
        let (who, e) = run(&a, &a, T0, T0 + 61_000).unwrap_err();
        assert_eq!(who, "server");
        assert!(matches!(
            e,
            AuthError::ClockSkew {
                skew_ms: 61_000,
                max_ms: 60_000
            }
        ));
        assert!(run(&a, &a, T0, T0 + 59_000).is_ok());
    }

    #[test]
    fn other_deployment_is_refused() {
        let a = identity(b"0123456789abcdef-secret", "a");
        let mut b = a.clone();
        b.deployment_id = Uuid::from_u128(99);
        let (_, e) = run(&a, &b, T0, T0).unwrap_err();
        assert!(matches!(e, AuthError::DeploymentMismatch { .. }), "{e}");
    }

    #[test]
    fn replayed_client_messages_fail_against_a_fresh_server_nonce() {
        let a = identity(b"0123456789abcdef-secret", "a");
        let (c, hello) = ClientStart::new(&a, [1; 32], T0, SKEW).unwrap();
        let (s, shello) = server_on_client_hello(&a, [2; 32], T0, SKEW, &hello).unwrap();
        let (_c, proof) = c.on_server_hello(&shello, T0).unwrap();
        assert!(s.on_client_proof(&proof).is_ok());
        // An attacker replays hello and proof on a new connection: the server's nonce differs.
        let (s2, _) = server_on_client_hello(&a, [3; 32], T0 + 1000, SKEW, &hello).unwrap();
        assert!(matches!(
            s2.on_client_proof(&proof),
            Err(AuthError::BadProof)
        ));
    }

    #[test]
    fn reflected_hello_is_refused() {
        let a = identity(b"0123456789abcdef-secret", "a");
        let (c, hello) = ClientStart::new(&a, [1; 32], T0, SKEW).unwrap();
        assert!(matches!(
            c.on_server_hello(&hello, T0),
            Err(AuthError::Malformed(_))
        ));
    }

    #[test]
    fn weak_secret_and_debug_redaction() {
        assert!(matches!(
            ClusterSecret::new(b"short"),
            Err(AuthError::WeakSecret { len: 5 })
        ));
        let s = ClusterSecret::new(b"0123456789abcdef-secret").unwrap();
        assert!(!format!("{s:?}").contains("0123"));
    }

    #[test]
    fn a_node_id_that_could_forge_log_lines_is_refused() {
        let server = identity(b"0123456789abcdef-secret", "server");
        let hello = |node_id: &str| {
            encode_message(&Message::Hello(Hello {
                role: Role::Client,
                deployment_id: server.deployment_id,
                nonce: [1; 32],
                timestamp_ms: T0,
                node_id: node_id.into(),
            }))
        };
        // Control: an ordinary endpoint name passes.
        assert!(server_on_client_hello(&server, [2; 32], T0, SKEW, &hello("node-1:9000")).is_ok());
        for forged in [
            "n1\n2026-01-01T00:00:00Z  INFO quarry: root login ok",
            "n1\r",
            "a b",
            "\u{1b}[2J",
            "n\u{e9}",
        ] {
            let e = server_on_client_hello(&server, [2; 32], T0, SKEW, &hello(forged))
                .err()
                .unwrap_or_else(|| panic!("{forged:?} accepted"));
            assert!(matches!(e, AuthError::Malformed(_)), "{forged:?}: {e}");
            assert!(!e.to_string().contains(forged), "{e}");
        }
        // And this node refuses to announce such an id itself.
        let bad = identity(b"0123456789abcdef-secret", "a\nb");
        assert!(matches!(
            ClientStart::new(&bad, [1; 32], T0, SKEW),
            Err(AuthError::NodeIdNotPrintable(_))
        ));
        // A deployment mismatch names the peer quoted.
        let mut other = server.clone();
        other.deployment_id = Uuid::from_u128(77);
        let e = server_on_client_hello(&other, [2; 32], T0, SKEW, &hello("node-1:9000"))
            .err()
            .unwrap();
        assert!(e.to_string().contains("\"node-1:9000\""), "{e}");
    }

    #[test]
    fn messages_round_trip() {
        for m in [
            Message::Hello(Hello {
                role: Role::Server,
                deployment_id: Uuid::from_u128(5),
                nonce: [4; 32],
                timestamp_ms: 77,
                node_id: "node-1:9000".into(),
            }),
            Message::Proof([8; 32]),
            Message::Reject(RejectReason::ClockSkew),
        ] {
            assert_eq!(decode_message(&encode_message(&m)).unwrap(), m);
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = decode_message(&bytes);
            let a = identity(b"0123456789abcdef-secret", "a");
            let _ = server_on_client_hello(&a, [0; 32], T0, SKEW, &bytes);
            let (c, _) = ClientStart::new(&a, [1; 32], T0, SKEW).unwrap();
            let _ = c.on_server_hello(&bytes, T0);
        }

        #[test]
        fn any_corrupted_byte_breaks_the_handshake(which in 0usize..3, pos in any::<prop::sample::Index>(), bit in 0u8..8) {
            let a = identity(b"0123456789abcdef-secret", "a");
            let (c, mut hello) = ClientStart::new(&a, [1; 32], T0, SKEW).unwrap();
            if which == 0 { let i = pos.index(hello.len()); hello[i] ^= 1 << bit; }
            let Ok((s, mut shello)) = server_on_client_hello(&a, [2; 32], T0, SKEW, &hello) else { return Ok(()) };
            if which == 1 { let i = pos.index(shello.len()); shello[i] ^= 1 << bit; }
            let Ok((c, mut proof)) = c.on_server_hello(&shello, T0) else { return Ok(()) };
            if which == 2 { let i = pos.index(proof.len()); proof[i] ^= 1 << bit; }
            let Ok((_, finish)) = s.on_client_proof(&proof) else { return Ok(()) };
            prop_assert!(c.on_server_finish(&finish).is_err(), "a corrupted handshake completed");
        }
    }
}
