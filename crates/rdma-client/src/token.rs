//! The token that names a client's registered buffer in an S3 request (`x-amz-rdma-token`),
//! shared by the client and the server (DESIGN.md, "S3 over RDMA to clients").
//!
//! `v1:<connection, 16 hex>:<address, 16 hex>:<rkey, 8 hex>:<length, decimal>:<expires, unix
//! seconds>:<MAC, 64 hex>`. The MAC is HMAC-SHA256 under the connection's key (which only the
//! client that made the connection and the node know) of [`Token::string_to_sign`]: the fields
//! and the request they are for (method, path and query as sent, the `Range` header), so a
//! token serves one request and only its client can make one.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The request header that carries the token.
pub const TOKEN_HEADER: &str = "x-amz-rdma-token";
/// The answer's header: bytes written into the buffer (GET) or read from it (PUT).
pub const BYTES_HEADER: &str = "x-amz-rdma-bytes";
/// Version of the connection exchange and of the token.
pub const PROTOCOL_VERSION: u32 = 1;
/// Bytes of a connection's token key.
pub const KEY_LEN: usize = 32;
/// How far ahead a token may expire.
pub const MAX_TOKEN_LIFETIME_SECS: u64 = 24 * 3600;
/// Path of the connection requests (`POST` to connect, `DELETE .../<id>` to close).
pub const CONNECTIONS_PATH: &str = "/quarry/rdma/v1/connections";

/// A slice of the client's registered memory, as the node's RDMA requests name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteSpan {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

/// A parsed token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub connection: u64,
    pub span: RemoteSpan,
    pub expires: u64,
    pub mac: [u8; 32],
}

/// What a token is for: the request as the node receives it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The URI path as sent (percent-encoded).
    pub path: &'a str,
    /// The raw query string, `""` for none.
    pub query: &'a str,
    /// The `Range` header, `""` for none.
    pub range: &'a str,
}

impl Token {
    pub fn parse(s: &str) -> Option<Token> {
        let f: Vec<&str> = s.trim().split(':').collect();
        let [v, conn, addr, rkey, len, expires, mac] = f.as_slice() else {
            return None;
        };
        let hex_n = |s: &str, n: usize| {
            (s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u64::from_str_radix(s, 16).ok())?
        };
        let digits = |s: &str| {
            (!s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u64>().ok())?
        };
        if *v != "v1" {
            return None;
        }
        let mut m = [0u8; 32];
        hex::decode_to_slice(mac, &mut m).ok()?;
        Some(Token {
            connection: hex_n(conn, 16)?,
            span: RemoteSpan {
                addr: hex_n(addr, 16)?,
                rkey: u32::try_from(hex_n(rkey, 8)?).ok()?,
                len: digits(len)?,
            },
            expires: digits(expires)?,
            mac: m,
        })
    }

    /// What the MAC covers.
    pub fn string_to_sign(
        connection: u64,
        span: &RemoteSpan,
        expires: u64,
        req: &Request<'_>,
    ) -> String {
        format!(
            "QUARRY-RDMA-TOKEN-1\n{connection:016x}\n{:016x}\n{:08x}\n{}\n{expires}\n{}\n{}\n{}\n{}",
            span.addr, span.rkey, span.len, req.method, req.path, req.query, req.range
        )
    }

    /// The MAC of a token's fields for `req` under `key`.
    pub fn mac(
        key: &[u8; KEY_LEN],
        connection: u64,
        span: &RemoteSpan,
        expires: u64,
        req: &Request<'_>,
    ) -> [u8; 32] {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
        m.update(Token::string_to_sign(connection, span, expires, req).as_bytes());
        m.finalize().into_bytes().into()
    }

    /// The header value of a token for `req`.
    pub fn sign(
        key: &[u8; KEY_LEN],
        connection: u64,
        span: RemoteSpan,
        expires: u64,
        req: &Request<'_>,
    ) -> String {
        let mac = Token::mac(key, connection, &span, expires, req);
        format!(
            "v1:{connection:016x}:{:016x}:{:08x}:{}:{expires}:{}",
            span.addr,
            span.rkey,
            span.len,
            hex::encode(mac)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(method: &'a str, path: &'a str, query: &'a str, range: &'a str) -> Request<'a> {
        Request {
            method,
            path,
            query,
            range,
        }
    }

    #[test]
    fn a_token_reads_back_and_its_mac_covers_the_request() {
        let key = [7u8; KEY_LEN];
        let span = RemoteSpan {
            addr: 0x7f00_1234_5000,
            rkey: 0xabcd,
            len: 1 << 20,
        };
        let r = req("GET", "/b/k", "", "bytes=0-9");
        let t = Token::sign(&key, 42, span, 1_900_000_000, &r);
        let p = Token::parse(&t).expect("parses");
        assert_eq!(p.connection, 42);
        assert_eq!(p.span, span);
        assert_eq!(p.expires, 1_900_000_000);
        assert_eq!(p.mac, Token::mac(&key, 42, &span, 1_900_000_000, &r));
        // Another request, another key, other fields: another MAC.
        for other in [
            req("PUT", "/b/k", "", "bytes=0-9"),
            req("GET", "/b/k2", "", "bytes=0-9"),
            req("GET", "/b/k", "versionId=x", "bytes=0-9"),
            req("GET", "/b/k", "", ""),
        ] {
            assert_ne!(p.mac, Token::mac(&key, 42, &span, 1_900_000_000, &other));
        }
        assert_ne!(
            p.mac,
            Token::mac(&[8u8; KEY_LEN], 42, &span, 1_900_000_000, &r)
        );
        assert_ne!(p.mac, Token::mac(&key, 43, &span, 1_900_000_000, &r));
        assert_ne!(p.mac, Token::mac(&key, 42, &span, 1_900_000_001, &r));
        let longer = RemoteSpan {
            len: span.len + 1,
            ..span
        };
        assert_ne!(p.mac, Token::mac(&key, 42, &longer, 1_900_000_000, &r));
    }

    #[test]
    fn malformed_tokens_do_not_parse() {
        let span = RemoteSpan {
            addr: 1,
            rkey: 2,
            len: 3,
        };
        let good = Token::sign(&[1; KEY_LEN], 1, span, 4, &req("GET", "/", "", ""));
        assert!(Token::parse(&good).is_some());
        let zeros = "0".repeat(64);
        for bad in [
            String::new(),
            "v1".into(),
            good.replacen("v1", "v2", 1),
            good[..good.len() - 2].to_string(),
            format!("{good}:x"),
            "v1:1:0000000000000001:00000002:3:4:00".into(),
            format!("v1:000000000000000g:0000000000000001:00000002:3:4:{zeros}"),
            format!("v1:+000000000000001:0000000000000001:00000002:3:4:{zeros}"),
            format!("v1:0000000000000001:0000000000000001:00000002:-3:4:{zeros}"),
            format!(
                "v1:0000000000000001:0000000000000001:00000002:99999999999999999999999:4:{zeros}"
            ),
        ] {
            assert!(Token::parse(&bad).is_none(), "{bad}");
        }
    }
}
