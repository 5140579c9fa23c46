//! RDMA settings and the start-up probe: whether this node can use the verbs data plane.
//!
//! `QUARRY_RDMA=off` never touches verbs; `auto` (the default) probes and uses TCP when there is no
//! usable device (the normal case on machines without an RDMA NIC: one info log line, no error);
//! `on` refuses to start when verbs cannot be used. libibverbs itself is loaded at run time
//! (`QUARRY_LIBIBVERBS` names another file than `libibverbs.so.1`): when it is missing or too old,
//! `auto` says so in its one line and `on` says what to install. The probe opens the device (the named one or
//! the first), checks that port 1 is active, takes the GID of `QUARRY_RDMA_GID_INDEX` or else the
//! RoCE v2 GID of the node's own address (any RoCE v2 GID when the address is not an IP), and
//! checks RLIMIT_MEMLOCK against the memory to register (`QUARRY_RDMA_POOL_BYTES`).
//!
//! [`RdmaSettings`] holds the validated settings; the `parse_*` functions are the validators the
//! command line, the environment and the config file share, each with a message that says what
//! is allowed.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// The port every probe and QP uses (Soft-RoCE and single-port NICs).
pub const RDMA_PORT: u8 = 1;

/// `QUARRY_RDMA`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RdmaMode {
    /// Never touch verbs.
    Off,
    /// Verbs must work, or the node refuses to start.
    On,
    /// Verbs when a usable device is found, else TCP.
    #[default]
    Auto,
}

impl RdmaMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RdmaMode::Off => "off",
            RdmaMode::On => "on",
            RdmaMode::Auto => "auto",
        }
    }
}

impl fmt::Display for RdmaMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RdmaMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "false" | "no" => Ok(RdmaMode::Off),
            "on" | "1" | "true" | "yes" => Ok(RdmaMode::On),
            "auto" => Ok(RdmaMode::Auto),
            other => Err(format!("QUARRY_RDMA={other:?}: use off, on or auto")),
        }
    }
}

/// Default `QUARRY_RDMA_QP_PER_PEER`.
pub const DEFAULT_QP_PER_PEER: usize = 2;
/// Default `QUARRY_RDMA_POOL_BYTES`: registered (pinned) memory of a node's data pools.
pub const DEFAULT_POOL_BYTES: u64 = 256 << 20;
/// Smallest `QUARRY_RDMA_POOL_BYTES`: a few buffers for each side.
pub const MIN_POOL_BYTES: u64 = 16 << 20;
/// Default `QUARRY_RDMA_MAX_CONNECTIONS`: RC connections a node accepts from peers.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Registered bytes of the staging pool of S3 over RDMA to clients (GET copies, PUT reads),
/// beside the data pools.
pub const CLIENT_STAGING_BYTES: u64 = 16 << 20;
/// Memory the kernel pins beyond the pools (queue pairs, completion queues), checked against
/// RLIMIT_MEMLOCK with them.
pub const PIN_MARGIN_BYTES: u64 = 8 << 20;

/// A node's RDMA settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaSettings {
    /// `QUARRY_RDMA`.
    pub mode: RdmaMode,
    /// `QUARRY_RDMA_DEVICE`: the device (default: the first one).
    pub device: Option<String>,
    /// `QUARRY_RDMA_GID_INDEX`: the GID of port 1 to use (default: the RoCE v2 GID of the node's
    /// own address).
    pub gid_index: Option<u32>,
    /// `QUARRY_RDMA_QP_PER_PEER` (1-256): RC queue pairs to each peer.
    pub qp_per_peer: usize,
    /// `QUARRY_RDMA_POOL_BYTES` (a power of two, at least 16 MiB): registered memory, split
    /// between the requester's data pool (3/4) and the holder's (1/4).
    pub pool_bytes: u64,
    /// `QUARRY_RDMA_MAX_CONNECTIONS` (1-1000): connections accepted from peers at once.
    pub max_connections: usize,
    /// `QUARRY_RDMA_CLIENT_IDLE`: how long an S3-over-RDMA client's connection may go unused
    /// before it is closed (a client that died between transfers is found no other way).
    pub client_idle: std::time::Duration,
}

impl Default for RdmaSettings {
    fn default() -> Self {
        RdmaSettings {
            mode: RdmaMode::Auto,
            device: None,
            gid_index: None,
            qp_per_peer: DEFAULT_QP_PER_PEER,
            pool_bytes: DEFAULT_POOL_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            client_idle: DEFAULT_CLIENT_IDLE,
        }
    }
}

impl RdmaSettings {
    /// Bytes of the requester's pool (GET stripes, PUT chunks).
    pub fn requester_bytes(&self) -> u64 {
        self.pool_bytes / 4 * 3
    }

    /// Bytes of the holder's pool (drive reads sent to peers, appends read from them).
    pub fn holder_bytes(&self) -> u64 {
        self.pool_bytes / 4
    }
}

/// The default of [`RdmaSettings::client_idle`].
pub const DEFAULT_CLIENT_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

/// `QUARRY_RDMA_GID_INDEX`: a GID table index (0-255 on every device seen; at most 65535).
pub fn parse_gid_index(s: &str) -> Result<u32, String> {
    s.trim()
        .parse::<u32>()
        .ok()
        .filter(|&i| i <= 0xffff)
        .ok_or_else(|| {
            format!("QUARRY_RDMA_GID_INDEX={s:?}: a GID table index such as 1 or 3 (see `ibv_devinfo -v`)")
        })
}

/// `QUARRY_RDMA_QP_PER_PEER`: 1 to 256.
pub fn parse_qp_per_peer(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=256).contains(n))
        .ok_or_else(|| {
            format!("QUARRY_RDMA_QP_PER_PEER={s:?}: a number of queue pairs from 1 to 256")
        })
}

/// `QUARRY_RDMA_MAX_CONNECTIONS`: 1 to 1000.
pub fn parse_max_connections(s: &str) -> Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=1000).contains(n))
        .ok_or_else(|| {
            format!("QUARRY_RDMA_MAX_CONNECTIONS={s:?}: a number of connections from 1 to 1000")
        })
}

/// A byte count: digits and an optional binary unit (`B`, `K`/`KiB`/`KB`, `M`/`MiB`/`MB`,
/// `G`/`GiB`/`GB`, any case), e.g. `256MiB`, `1g`, `16777216`; `None` when it is not one or
/// does not fit in 64 bits. The syntax of every size setting.
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// `QUARRY_RDMA_POOL_BYTES`: a power of two of at least 16 MiB, as bytes (`268435456`) or with a
/// binary unit (`256MiB`, `1GiB`; `K`, `M`, `G` mean the same).
pub fn parse_pool_bytes(s: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "QUARRY_RDMA_POOL_BYTES={s:?}: a power of two of at least 16MiB, e.g. 256MiB, 1GiB or 268435456"
        )
    };
    let bytes = parse_size(s).ok_or_else(bad)?;
    if !bytes.is_power_of_two() {
        return Err(format!("{}: {bytes} is not a power of two", bad()));
    }
    if bytes < MIN_POOL_BYTES {
        return Err(format!("{}: {bytes} is less than 16MiB", bad()));
    }
    Ok(bytes)
}

/// What the probe found usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    pub device: String,
    pub port: u8,
    pub gid_index: u32,
    pub gid_addr: IpAddr,
    /// Active MTU of the port, in bytes.
    pub mtu: u32,
}

/// Why verbs cannot be used here.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// This build has no verbs support (crate `quarry-net` without its `verbs` feature).
    #[error("this build has no RDMA support (quarry-net built without the `verbs` feature)")]
    NotBuilt,
    /// No device or no kernel support: the normal TCP case.
    #[error("{0}")]
    NoDevice(String),
    /// libibverbs (loaded at run time) is missing or too old: TCP as without a device. The text
    /// says which library (`libibverbs.so.1`, or what `QUARRY_LIBIBVERBS` names) and what is wrong.
    #[error("{0}: install rdma-core's verbs library and your device's provider (Debian/Ubuntu: apt install libibverbs1 ibverbs-providers; Fedora/RHEL: dnf install libibverbs)")]
    NoLibrary(String),
    /// A device exists but cannot be used (named device missing, port down, no RoCE v2 GID,
    /// RLIMIT_MEMLOCK too small, ...).
    #[error("{0}")]
    Unusable(String),
}

impl ProbeError {
    /// No device, no kernel support or no verbs in this build: `auto` quietly uses TCP.
    pub fn is_no_device(&self) -> bool {
        matches!(
            self,
            ProbeError::NoDevice(_) | ProbeError::NoLibrary(_) | ProbeError::NotBuilt
        )
    }
}

/// Probes the settings' device (or the first device), port [`RDMA_PORT`], GID (its index, or the
/// RoCE v2 GID of `addr`) and RLIMIT_MEMLOCK against the pools.
#[cfg(feature = "verbs")]
pub fn probe(settings: &RdmaSettings, addr: Option<IpAddr>) -> Result<RdmaDevice, ProbeError> {
    use quarry_verbs::Error;
    let classify = |e: Error| {
        if e.is_no_library() {
            ProbeError::NoLibrary(e.to_string())
        } else if e.is_no_device() {
            ProbeError::NoDevice(e.to_string())
        } else {
            ProbeError::Unusable(e.to_string())
        }
    };
    let ctx = quarry_verbs::Context::open(settings.device.as_deref()).map_err(classify)?;
    let port = ctx.active_port(RDMA_PORT).map_err(classify)?;
    let gid = match settings.gid_index {
        Some(i) => ctx
            .query_gid(RDMA_PORT, i)
            .map_err(classify)?
            .ok_or_else(|| {
                ProbeError::Unusable(format!(
                "QUARRY_RDMA_GID_INDEX={i}: that entry of {} port {RDMA_PORT}'s GID table is empty",
                ctx.name()
            ))
            })?,
        None => ctx
            .select_roce_v2_gid(RDMA_PORT, addr.filter(|a| !a.is_loopback()))
            .map_err(classify)?,
    };
    quarry_verbs::check_memlock(settings.pool_bytes + CLIENT_STAGING_BYTES + PIN_MARGIN_BYTES).map_err(|e| match e {
        quarry_verbs::Error::MemlockTooSmall { .. } => ProbeError::Unusable(format!(
            "{e} (QUARRY_RDMA_POOL_BYTES={} needs that much pinned memory; raise `ulimit -l` or lower it)",
            settings.pool_bytes
        )),
        other => classify(other),
    })?;
    Ok(RdmaDevice {
        device: ctx.name().to_string(),
        port: RDMA_PORT,
        gid_index: gid.index,
        gid_addr: gid.gid.to_ip(),
        mtu: port.active_mtu.bytes(),
    })
}

/// Without the `verbs` feature there is nothing to probe.
#[cfg(not(feature = "verbs"))]
pub fn probe(_settings: &RdmaSettings, _addr: Option<IpAddr>) -> Result<RdmaDevice, ProbeError> {
    Err(ProbeError::NotBuilt)
}

/// The data-plane backend a node chose at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Tcp { reason: String },
    Verbs(RdmaDevice),
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Tcp { .. } => "tcp",
            Backend::Verbs(_) => "verbs",
        }
    }
}

/// Decides the backend for `mode`: `off` does not probe; `auto` falls back to TCP on any probe
/// failure (the reason is in [`Backend::Tcp`]); `on` returns the probe's error.
pub fn choose_backend(
    settings: &RdmaSettings,
    addr: Option<IpAddr>,
) -> Result<Backend, ProbeError> {
    match settings.mode {
        RdmaMode::Off => Ok(Backend::Tcp {
            reason: "QUARRY_RDMA=off".into(),
        }),
        RdmaMode::Auto => Ok(match probe(settings, addr) {
            Ok(d) => Backend::Verbs(d),
            // "libibverbs.so.1 not found": the whole story, in one line.
            Err(ProbeError::NoLibrary(what)) => Backend::Tcp { reason: what },
            Err(e) if e.is_no_device() => Backend::Tcp {
                reason: format!("no device ({e})"),
            },
            Err(e) => Backend::Tcp {
                reason: format!("device not usable ({e})"),
            },
        }),
        RdmaMode::On => probe(settings, addr).map(Backend::Verbs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!("off".parse::<RdmaMode>(), Ok(RdmaMode::Off));
        assert_eq!("ON".parse::<RdmaMode>(), Ok(RdmaMode::On));
        assert_eq!(" auto ".parse::<RdmaMode>(), Ok(RdmaMode::Auto));
        assert!("maybe"
            .parse::<RdmaMode>()
            .unwrap_err()
            .contains("off, on or auto"));
        assert_eq!(RdmaMode::default(), RdmaMode::Auto);
    }

    #[test]
    fn off_never_probes_and_auto_falls_back_here() {
        let with = |mode| RdmaSettings {
            mode,
            device: Some("nope0".into()),
            ..RdmaSettings::default()
        };
        let b = choose_backend(&with(RdmaMode::Off), None).unwrap();
        assert_eq!(b.name(), "tcp");
        // These machines have no RDMA device: auto is TCP with a reason, on is an error.
        let any = RdmaSettings::default();
        if probe(&any, None).is_err() {
            let b = choose_backend(&any, None).unwrap();
            assert_eq!(b.name(), "tcp", "{b:?}");
            let on = RdmaSettings {
                mode: RdmaMode::On,
                ..any
            };
            let e = choose_backend(&on, None).unwrap_err();
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn settings_are_validated_with_messages_that_say_what_is_allowed() {
        assert_eq!(parse_qp_per_peer("1"), Ok(1));
        assert_eq!(parse_qp_per_peer(" 256 "), Ok(256));
        for bad in ["0", "257", "-1", "two", ""] {
            let e = parse_qp_per_peer(bad).unwrap_err();
            assert!(e.contains("from 1 to 256"), "{bad}: {e}");
        }
        assert_eq!(parse_max_connections("1000"), Ok(1000));
        for bad in ["0", "1001", "x"] {
            assert!(parse_max_connections(bad)
                .unwrap_err()
                .contains("1 to 1000"));
        }
        assert_eq!(parse_gid_index("3"), Ok(3));
        assert!(parse_gid_index("-1")
            .unwrap_err()
            .contains("GID table index"));
        assert!(parse_gid_index("65536").is_err());
        assert_eq!(parse_pool_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_pool_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_pool_bytes("1g"), Ok(1 << 30));
        assert_eq!(parse_pool_bytes("16777216"), Ok(16 << 20));
        assert_eq!(parse_pool_bytes("65536K"), Ok(64 << 20));
        let e = parse_pool_bytes("100MiB").unwrap_err();
        assert!(e.contains("not a power of two"), "{e}");
        let e = parse_pool_bytes("8MiB").unwrap_err();
        assert!(e.contains("less than 16MiB"), "{e}");
        for bad in ["", "MiB", "12TiB", "1.5GiB", "99999999999999999999"] {
            assert!(parse_pool_bytes(bad).is_err(), "{bad}");
        }
        let s = RdmaSettings::default();
        assert_eq!(s.requester_bytes() + s.holder_bytes(), s.pool_bytes);
    }
}
