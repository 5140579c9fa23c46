//! The verbs data plane's messages on the control RPC (connect, read, append): pure encode and
//! decode, versioned, fuzzable.

use super::*;

/// A malformed verbs message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("verbs message truncated")]
    Truncated,
    #[error("verbs protocol version {0} (this build speaks {PROTOCOL_VERSION})")]
    Version(u8),
    #[error("{0}")]
    Endpoint(String),
    #[error("verbs message: {0} is not UTF-8")]
    Utf8(&'static str),
    #[error("verbs message: {0} trailing bytes")]
    Trailing(usize),
}

fn need(b: &[u8], n: usize) -> Result<(), MessageError> {
    if b.remaining() < n {
        Err(MessageError::Truncated)
    } else {
        Ok(())
    }
}

fn version(b: &mut &[u8]) -> Result<(), MessageError> {
    need(b, 1)?;
    match b.get_u8() {
        PROTOCOL_VERSION => Ok(()),
        v => Err(MessageError::Version(v)),
    }
}

fn endpoint(b: &mut &[u8]) -> Result<QpEndpoint, MessageError> {
    need(b, ENDPOINT_LEN)?;
    let e = QpEndpoint::decode(&b[..ENDPOINT_LEN])
        .map_err(|e| MessageError::Endpoint(e.to_string()))?;
    b.advance(ENDPOINT_LEN);
    Ok(e)
}

fn done(b: &[u8]) -> Result<(), MessageError> {
    if b.is_empty() {
        Ok(())
    } else {
        Err(MessageError::Trailing(b.len()))
    }
}

/// Requester -> holder: connect to this endpoint (which carries the requester's MTU), replacing
/// connection `replaces` of the same requester (0: none), which the holder then drops.
pub fn encode_connect(ep: &QpEndpoint, replaces: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(9 + ENDPOINT_LEN);
    b.put_u8(PROTOCOL_VERSION);
    b.put_slice(&ep.encode());
    b.put_u64_le(replaces);
    b.freeze()
}

pub fn decode_connect(mut b: &[u8]) -> Result<(QpEndpoint, u64), MessageError> {
    version(&mut b)?;
    let e = endpoint(&mut b)?;
    need(b, 8)?;
    let replaces = b.get_u64_le();
    done(b)?;
    Ok((e, replaces))
}

/// Holder -> requester: the connection id to name in reads, and the holder's endpoint.
pub fn encode_connected(conn: u64, ep: &QpEndpoint) -> Bytes {
    let mut b = BytesMut::with_capacity(9 + ENDPOINT_LEN);
    b.put_u8(PROTOCOL_VERSION);
    b.put_u64_le(conn);
    b.put_slice(&ep.encode());
    b.freeze()
}

pub fn decode_connected(mut b: &[u8]) -> Result<(u64, QpEndpoint), MessageError> {
    version(&mut b)?;
    need(b, 8)?;
    let conn = b.get_u64_le();
    let e = endpoint(&mut b)?;
    done(b)?;
    Ok((conn, e))
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

pub fn encode_read(r: &ReadRequest) -> Bytes {
    let mut b = BytesMut::with_capacity(80 + r.bucket.len() + r.key.len());
    b.put_u8(PROTOCOL_VERSION);
    b.put_u64_le(r.conn);
    b.put_u32_le(r.tag);
    b.put_u64_le(r.remote.addr);
    b.put_u32_le(r.remote.rkey);
    b.put_u64_le(r.remote.len);
    b.put_u16_le(r.drive);
    b.put_slice(r.data_dir.as_bytes());
    b.put_u32_le(r.part);
    b.put_u64_le(r.offset);
    b.put_u32_le(r.len);
    for s in [&r.bucket, &r.key] {
        b.put_u16_le(u16::try_from(s.len()).unwrap_or(u16::MAX));
        b.put_slice(&s.as_bytes()[..s.len().min(u16::MAX as usize)]);
    }
    b.freeze()
}

pub fn decode_read(mut b: &[u8]) -> Result<ReadRequest, MessageError> {
    version(&mut b)?;
    need(b, 8 + 4 + 8 + 4 + 8 + 2 + 16 + 4 + 8 + 4)?;
    let conn = b.get_u64_le();
    let tag = b.get_u32_le();
    let remote = RemoteBuf {
        addr: b.get_u64_le(),
        rkey: b.get_u32_le(),
        len: b.get_u64_le(),
    };
    let drive = b.get_u16_le();
    let mut id = [0u8; 16];
    b.copy_to_slice(&mut id);
    let part = b.get_u32_le();
    let offset = b.get_u64_le();
    let len = b.get_u32_le();
    let mut strs = Vec::with_capacity(2);
    for what in ["bucket", "key"] {
        need(b, 2)?;
        let n = b.get_u16_le() as usize;
        need(b, n)?;
        let s = std::str::from_utf8(&b[..n]).map_err(|_| MessageError::Utf8(what))?;
        strs.push(s.to_owned());
        b.advance(n);
    }
    done(b)?;
    let key = strs.pop().unwrap_or_default();
    let bucket = strs.pop().unwrap_or_default();
    Ok(ReadRequest {
        conn,
        tag,
        remote,
        drive,
        bucket,
        key,
        data_dir: Uuid::from_bytes(id),
        part,
        offset,
        len,
    })
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

pub fn encode_append(r: &AppendRequest) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_u8(PROTOCOL_VERSION);
    b.put_u64_le(r.conn);
    b.put_u16_le(r.drive);
    b.put_slice(r.writer.as_bytes());
    b.put_u64_le(r.seq);
    b.put_u64_le(r.remote.addr);
    b.put_u32_le(r.remote.rkey);
    b.put_u64_le(r.remote.len);
    b.freeze()
}

pub fn decode_append(mut b: &[u8]) -> Result<AppendRequest, MessageError> {
    version(&mut b)?;
    need(b, 8 + 2 + 16 + 8 + 8 + 4 + 8)?;
    let conn = b.get_u64_le();
    let drive = b.get_u16_le();
    let mut id = [0u8; 16];
    b.copy_to_slice(&mut id);
    let seq = b.get_u64_le();
    let remote = RemoteBuf {
        addr: b.get_u64_le(),
        rkey: b.get_u32_le(),
        len: b.get_u64_le(),
    };
    done(b)?;
    Ok(AppendRequest {
        conn,
        drive,
        writer: Uuid::from_bytes(id),
        seq,
        remote,
    })
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
        assert_eq!(decode_connect(&bad), Err(MessageError::Version(9)));
        let good = encode_connect(&e, 0);
        for n in 0..good.len() {
            assert!(decode_connect(&good[..n]).is_err(), "{n}");
        }
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(decode_connect(&long), Err(MessageError::Trailing(1)));
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
        assert_eq!(decode_append(&long), Err(MessageError::Trailing(1)));
        let mut old = enc.to_vec();
        old[0] = 1;
        assert_eq!(decode_append(&old), Err(MessageError::Version(1)));
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
        for n in 0..enc.len() {
            assert!(decode_read(&enc[..n]).is_err(), "{n}");
        }
        let mut bad = enc.to_vec();
        let at = bad.len() - 1;
        bad[at] = 0xff;
        assert_eq!(decode_read(&bad), Err(MessageError::Utf8("key")));
    }
}
