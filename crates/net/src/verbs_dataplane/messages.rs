//! The verbs data plane's messages on the control RPC (connect, read, append): pure encode and
//! decode with the internode codec ([`crate::codec`]), versioned ([`PROTOCOL_VERSION`]), fuzzable.
//!
//! ```text
//! connect    version | endpoint (28 bytes, its own format) | replaces (u64)
//! connected  version | connection id (u64) | endpoint (28 bytes)
//! read       version | ReadRequest's fields in order
//! (answer)   version | bytes written (u32)
//! append     version | AppendRequest's fields in order
//! ```

use super::*;
use crate::codec::{self, BufExt, Codec, CodecError};

/// A QP endpoint travels in its own versioned 28-byte format ([`QpEndpoint::encode`]).
impl Codec for QpEndpoint {
    const MIN_LEN: usize = ENDPOINT_LEN;

    fn encode<B: BufMut>(&self, b: &mut B) {
        b.put_slice(&QpEndpoint::encode(self));
    }

    fn decode<B: Buf>(b: &mut B) -> Result<QpEndpoint, CodecError> {
        let raw: [u8; ENDPOINT_LEN] = b.get_value()?;
        QpEndpoint::decode(&raw).map_err(|e| CodecError::Invalid {
            what: "QP endpoint",
            why: e.to_string(),
        })
    }
}

crate::codec_struct!(RemoteBuf { addr, rkey, len });

/// A message of the verbs data plane: its version, then `value`.
fn message<T: Codec>(value: &T) -> Bytes {
    codec::versioned(PROTOCOL_VERSION, value)
}

fn from_message<T: Codec>(b: &[u8]) -> Result<T, CodecError> {
    codec::from_versioned("verbs data plane protocol", PROTOCOL_VERSION, b)
}

/// Requester -> holder: connect to this endpoint (which carries the requester's MTU), replacing
/// connection `replaces` of the same requester (0: none), which the holder then drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Connect {
    endpoint: QpEndpoint,
    replaces: u64,
}
crate::codec_struct!(Connect { endpoint, replaces });

/// Holder -> requester: the connection id to name in reads, and the holder's endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Connected {
    conn: u64,
    endpoint: QpEndpoint,
}
crate::codec_struct!(Connected { conn, endpoint });

pub fn encode_connect(ep: &QpEndpoint, replaces: u64) -> Bytes {
    message(&Connect {
        endpoint: *ep,
        replaces,
    })
}

pub fn decode_connect(b: &[u8]) -> Result<(QpEndpoint, u64), CodecError> {
    let c: Connect = from_message(b)?;
    Ok((c.endpoint, c.replaces))
}

pub fn encode_connected(conn: u64, ep: &QpEndpoint) -> Bytes {
    message(&Connected {
        conn,
        endpoint: *ep,
    })
}

pub fn decode_connected(b: &[u8]) -> Result<(u64, QpEndpoint), CodecError> {
    let c: Connected = from_message(b)?;
    Ok((c.conn, c.endpoint))
}

/// A read request: where to write (`remote`, immediate `tag`) and what (drive and shard range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    pub conn: u64,
    pub tag: u32,
    pub remote: RemoteBuf,
    pub drive: u16,
    pub bucket: String,
    pub key: String,
    pub data_dir: Uuid,
    pub part: u32,
    pub offset: u64,
    pub len: u32,
}
crate::codec_struct!(ReadRequest {
    conn,
    tag,
    remote,
    drive,
    bucket,
    key,
    data_dir,
    part,
    offset,
    len
});

pub fn encode_read(r: &ReadRequest) -> Bytes {
    message(r)
}

pub fn decode_read(b: &[u8]) -> Result<ReadRequest, CodecError> {
    from_message(b)
}

/// Holder -> requester, after its RDMA WRITE of a read completed: how many bytes it wrote.
pub fn encode_read_answer(written: u32) -> Bytes {
    message(&written)
}

pub fn decode_read_answer(b: &[u8]) -> Result<u32, CodecError> {
    from_message(b)
}

/// An append: RDMA-READ `remote` (the requester's bytes) and write them as append `seq` of
/// shard writer `writer` on drive `drive`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendRequest {
    pub conn: u64,
    pub drive: u16,
    pub writer: Uuid,
    pub seq: u64,
    pub remote: RemoteBuf,
}
crate::codec_struct!(AppendRequest {
    conn,
    drive,
    writer,
    seq,
    remote
});

pub fn encode_append(r: &AppendRequest) -> Bytes {
    message(r)
}

pub fn decode_append(b: &[u8]) -> Result<AppendRequest, CodecError> {
    from_message(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_verbs::{Gid, Mtu};

    fn ep() -> QpEndpoint {
        QpEndpoint {
            qpn: 0x12_3456,
            psn: 0x65_4321,
            gid: Gid::from_ip("10.55.0.2".parse().unwrap()),
            lid: 0,
            mtu: Mtu::from_code(3).unwrap(),
        }
    }

    #[test]
    fn connect_messages_round_trip_and_reject_garbage() {
        let e = ep();
        assert_eq!(decode_connect(&encode_connect(&e, 3)).unwrap(), (e, 3));
        assert_eq!(
            decode_connected(&encode_connected(77, &e)).unwrap(),
            (77, e)
        );
        let mut bad = encode_connect(&e, 0).to_vec();
        bad[0] = 9;
        assert_eq!(
            decode_connect(&bad),
            Err(CodecError::UnsupportedVersion {
                what: "verbs data plane protocol",
                got: 9,
                supported: PROTOCOL_VERSION
            })
        );
        let good = encode_connect(&e, 0);
        for n in 0..good.len() {
            assert!(decode_connect(&good[..n]).is_err(), "{n}");
        }
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(decode_connect(&long), Err(CodecError::Trailing(1)));
    }

    #[test]
    fn append_messages_round_trip_and_reject_garbage() {
        let r = AppendRequest {
            conn: 77,
            drive: 2,
            writer: Uuid::new_v4(),
            seq: 41,
            remote: RemoteBuf {
                addr: 0x7f00_1234_0000,
                rkey: 0xbeef,
                len: (1 << 20) + 32,
            },
        };
        let enc = encode_append(&r);
        assert_eq!(decode_append(&enc).unwrap(), r);
        for n in 0..enc.len() {
            assert!(decode_append(&enc[..n]).is_err(), "{n}");
        }
        let mut long = enc.to_vec();
        long.push(1);
        assert_eq!(decode_append(&long), Err(CodecError::Trailing(1)));
        let mut old = enc.to_vec();
        old[0] = 2;
        assert_eq!(
            decode_append(&old),
            Err(CodecError::UnsupportedVersion {
                what: "verbs data plane protocol",
                got: 2,
                supported: PROTOCOL_VERSION
            })
        );
    }

    #[test]
    fn read_messages_round_trip_and_reject_garbage() {
        let r = ReadRequest {
            conn: 5,
            tag: 9,
            remote: RemoteBuf {
                addr: 0xdead_0000,
                rkey: 0x1234,
                len: 4096,
            },
            drive: 3,
            bucket: "b".into(),
            key: "dir/k\u{e9}".into(),
            data_dir: Uuid::new_v4(),
            part: 1,
            offset: 1 << 40,
            len: 4000,
        };
        let enc = encode_read(&r);
        assert_eq!(decode_read(&enc).unwrap(), r);
        assert_eq!(decode_read_answer(&encode_read_answer(4000)), Ok(4000));
        for n in 0..enc.len() {
            assert!(decode_read(&enc[..n]).is_err(), "{n}");
        }
        let mut bad = enc.to_vec();
        // The key's last byte: data_dir, part, offset and len (32 bytes) follow it.
        let at = bad.len() - 33;
        bad[at] = 0xff;
        assert!(matches!(decode_read(&bad), Err(CodecError::BadUtf8 { .. })));
    }
}
