//! What two sides exchange out of band to connect an RC queue pair, and its wire format.
//!
//! Format (version 1, 28 bytes, big-endian):
//!
//! ```text
//! 0      version (1)
//! 1      path MTU code (ibv_mtu: 1 = 256 ... 5 = 4096)
//! 2..4   LID (0 on RoCE)
//! 4..8   QP number (24 bits)
//! 8..12  initial packet sequence number (24 bits)
//! 12..28 GID
//! ```

use std::fmt;

use crate::device::{Gid, Mtu};

pub const ENDPOINT_VERSION: u8 = 1;
pub const ENDPOINT_LEN: usize = 28;

/// One side of an RC connection: what the peer needs to move its QP to RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpEndpoint {
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
    pub lid: u16,
    /// The sender's active port MTU; the path MTU is the smaller of both.
    pub mtu: Mtu,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("QP endpoint: expected {ENDPOINT_LEN} bytes, got {0}")]
    Length(usize),
    #[error("QP endpoint: unknown format version {0} (this build speaks {ENDPOINT_VERSION})")]
    UnknownVersion(u8),
    #[error("QP endpoint: invalid MTU code {0}")]
    BadMtu(u8),
    #[error("QP endpoint: {field} {value:#x} does not fit in 24 bits")]
    Out24 { field: &'static str, value: u32 },
}

const MAX24: u32 = (1 << 24) - 1;

impl QpEndpoint {
    /// The version-1 encoding.
    pub fn encode(&self) -> [u8; ENDPOINT_LEN] {
        let mut b = [0u8; ENDPOINT_LEN];
        b[0] = ENDPOINT_VERSION;
        b[1] = self.mtu.code();
        b[2..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&(self.qpn & MAX24).to_be_bytes());
        b[8..12].copy_from_slice(&(self.psn & MAX24).to_be_bytes());
        b[12..28].copy_from_slice(&self.gid.0);
        b
    }

    /// Parses an encoding; any other length, version or value out of range is an error.
    pub fn decode(b: &[u8]) -> Result<QpEndpoint, EndpointError> {
        // The version comes first so that a longer future format says "unknown version".
        match b.first() {
            None => return Err(EndpointError::Length(0)),
            Some(&v) if v != ENDPOINT_VERSION => return Err(EndpointError::UnknownVersion(v)),
            _ => {}
        }
        let b: &[u8; ENDPOINT_LEN] = b.try_into().map_err(|_| EndpointError::Length(b.len()))?;
        let mtu = Mtu::from_code(b[1]).ok_or(EndpointError::BadMtu(b[1]))?;
        let lid = u16::from_be_bytes([b[2], b[3]]);
        let qpn = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let psn = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
        if qpn > MAX24 {
            return Err(EndpointError::Out24 {
                field: "QP number",
                value: qpn,
            });
        }
        if psn > MAX24 {
            return Err(EndpointError::Out24 {
                field: "PSN",
                value: psn,
            });
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[12..28]);
        Ok(QpEndpoint {
            qpn,
            psn,
            gid: Gid(gid),
            lid,
            mtu,
        })
    }
}

impl fmt::Display for QpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "qpn {:#x} psn {:#x} gid {} lid {} mtu {}",
            self.qpn,
            self.psn,
            self.gid,
            self.lid,
            self.mtu.bytes()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> QpEndpoint {
        QpEndpoint {
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from_ip("10.55.0.2".parse().unwrap()),
            lid: 0,
            mtu: Mtu::Mtu1024,
        }
    }

    #[test]
    fn round_trips() {
        let e = sample();
        let b = e.encode();
        assert_eq!(b.len(), ENDPOINT_LEN);
        assert_eq!(QpEndpoint::decode(&b), Ok(e));
        let ib = QpEndpoint {
            qpn: MAX24,
            psn: 0,
            gid: Gid([0xfe; 16]),
            lid: 0xbeef,
            mtu: Mtu::Mtu4096,
        };
        assert_eq!(QpEndpoint::decode(&ib.encode()), Ok(ib));
    }

    #[test]
    fn fixed_layout() {
        // Pin the wire format: a change here breaks mixed-version clusters.
        let b = sample().encode();
        assert_eq!(
            b,
            [
                1, 3, 0, 0, 0, 0, 0, 0x11, 0, 0xab, 0xcd, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff,
                0xff, 10, 55, 0, 2
            ]
        );
    }

    #[test]
    fn rejects_bad_input() {
        let b = sample().encode();
        assert_eq!(QpEndpoint::decode(&[]), Err(EndpointError::Length(0)));
        assert_eq!(QpEndpoint::decode(&b[..27]), Err(EndpointError::Length(27)));
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(QpEndpoint::decode(&long), Err(EndpointError::Length(29)));
        let mut v = b;
        v[0] = 2;
        assert_eq!(
            QpEndpoint::decode(&v),
            Err(EndpointError::UnknownVersion(2))
        );
        let mut m = b;
        m[1] = 0;
        assert_eq!(QpEndpoint::decode(&m), Err(EndpointError::BadMtu(0)));
        m[1] = 6;
        assert_eq!(QpEndpoint::decode(&m), Err(EndpointError::BadMtu(6)));
        let mut q = b;
        q[4] = 1;
        assert!(matches!(
            QpEndpoint::decode(&q),
            Err(EndpointError::Out24 {
                field: "QP number",
                ..
            })
        ));
        let mut p = b;
        p[8] = 1;
        assert!(matches!(
            QpEndpoint::decode(&p),
            Err(EndpointError::Out24 { field: "PSN", .. })
        ));
    }

    #[test]
    fn decode_never_panics() {
        // Every length up to one past the format, with every byte value at each position of
        // the header: errors or values, never a panic.
        for len in 0..=ENDPOINT_LEN + 1 {
            for pos in 0..len.min(12) {
                for v in [0u8, 1, 2, 5, 6, 0x7f, 0xff] {
                    let mut b = vec![1u8; len];
                    b[pos] = v;
                    let _ = QpEndpoint::decode(&b);
                }
            }
        }
    }
}
