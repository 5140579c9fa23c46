//! RDMA settings and the start-up probe: whether this node can use the verbs data plane.
//!
//! `QUARRY_RDMA=off` never touches verbs; `auto` (the default) probes and uses TCP when there is no
//! usable device (the normal case on machines without an RDMA NIC: one info log line, no error);
//! `on` refuses to start when verbs cannot be used. The probe opens the device (the named one or
//! the first), checks that port 1 is active, picks the RoCE v2 GID of the node's own address (any
//! RoCE v2 GID when the address is not an IP) and checks RLIMIT_MEMLOCK against the memory to
//! register.

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
    /// A device exists but cannot be used (named device missing, port down, no RoCE v2 GID,
    /// RLIMIT_MEMLOCK too small, ...).
    #[error("{0}")]
    Unusable(String),
}

impl ProbeError {
    /// No device, no kernel support or no verbs in this build: `auto` quietly uses TCP.
    pub fn is_no_device(&self) -> bool {
        matches!(self, ProbeError::NoDevice(_) | ProbeError::NotBuilt)
    }
}

/// Probes `device` (or the first device), port [`RDMA_PORT`], the RoCE v2 GID of `addr` and
/// RLIMIT_MEMLOCK against `register_bytes`.
#[cfg(feature = "verbs")]
pub fn probe(
    device: Option<&str>,
    addr: Option<IpAddr>,
    register_bytes: u64,
) -> Result<RdmaDevice, ProbeError> {
    use quarry_verbs::Error;
    let classify = |e: Error| {
        if e.is_no_device() {
            ProbeError::NoDevice(e.to_string())
        } else {
            ProbeError::Unusable(e.to_string())
        }
    };
    let ctx = quarry_verbs::Context::open(device).map_err(classify)?;
    let port = ctx.active_port(RDMA_PORT).map_err(classify)?;
    let gid = ctx
        .select_roce_v2_gid(RDMA_PORT, addr.filter(|a| !a.is_loopback()))
        .map_err(classify)?;
    quarry_verbs::check_memlock(register_bytes).map_err(classify)?;
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
pub fn probe(
    _device: Option<&str>,
    _addr: Option<IpAddr>,
    _register_bytes: u64,
) -> Result<RdmaDevice, ProbeError> {
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
    mode: RdmaMode,
    device: Option<&str>,
    addr: Option<IpAddr>,
    register_bytes: u64,
) -> Result<Backend, ProbeError> {
    match mode {
        RdmaMode::Off => Ok(Backend::Tcp {
            reason: "QUARRY_RDMA=off".into(),
        }),
        RdmaMode::Auto => Ok(match probe(device, addr, register_bytes) {
            Ok(d) => Backend::Verbs(d),
            Err(e) if e.is_no_device() => Backend::Tcp {
                reason: format!("no device ({e})"),
            },
            Err(e) => Backend::Tcp {
                reason: format!("device not usable ({e})"),
            },
        }),
        RdmaMode::On => probe(device, addr, register_bytes).map(Backend::Verbs),
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
        let b = choose_backend(RdmaMode::Off, Some("nope0"), None, 1 << 30).unwrap();
        assert_eq!(b.name(), "tcp");
        // These machines have no RDMA device: auto is TCP with a reason, on is an error.
        if probe(None, None, 0).is_err() {
            let b = choose_backend(RdmaMode::Auto, None, None, 0).unwrap();
            assert_eq!(b.name(), "tcp", "{b:?}");
            let e = choose_backend(RdmaMode::On, None, None, 0).unwrap_err();
            assert!(!e.to_string().is_empty());
        }
    }
}
