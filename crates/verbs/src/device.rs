//! Devices, the open device context, ports and GIDs.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv6Addr};
use std::os::raw::c_int;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::sys::{self, Verbs};

/// One RDMA device as libibverbs lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    /// Node GUID, in host order.
    pub guid: u64,
}

/// Owns the array returned by `ibv_get_device_list`.
struct DeviceList {
    v: &'static Verbs,
    list: *mut *mut sys::ibv_device,
    len: usize,
}

impl DeviceList {
    fn get() -> Result<DeviceList> {
        let v = sys::verbs()?;
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out-pointer for the call's duration. The function returns NULL
        // (errno set) or an array of `n` device pointers that `Drop` frees exactly once.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() {
            let e = io::Error::last_os_error();
            return Err(Error::NoDevice {
                reason: format!(
                    "libibverbs cannot list devices: {e} (no RDMA support in this kernel?)"
                ),
            });
        }
        Ok(DeviceList {
            v,
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    fn iter(&self) -> impl Iterator<Item = *mut sys::ibv_device> + '_ {
        // SAFETY: `list` holds `len` valid device pointers until `self` is dropped, and the
        // iterator borrows `self`.
        (0..self.len).map(move |i| unsafe { *self.list.add(i) })
    }

    fn info(&self, dev: *mut sys::ibv_device) -> DeviceInfo {
        // SAFETY: `dev` comes from a live device list; the name is a NUL-terminated string owned
        // by the device, copied here before the list can be freed.
        let name = unsafe { CStr::from_ptr((self.v.get_device_name)(dev)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: as above; the call only reads the device.
        let guid = u64::from_be(unsafe { (self.v.get_device_guid)(dev) });
        DeviceInfo { name, guid }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` was returned by ibv_get_device_list and is freed only here.
        unsafe { (self.v.free_device_list)(self.list) }
    }
}

/// The RDMA devices of this machine. `Err(NoDevice)` when the kernel has no RDMA support; an
/// empty list when it has but no device exists.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let list = DeviceList::get()?;
    Ok(list.iter().map(|d| list.info(d)).collect())
}

/// Limits of a device, as `ibv_query_device` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    pub max_mr_size: u64,
    /// Outstanding RDMA READs a QP may receive (responder side).
    pub max_qp_rd_atom: u8,
    /// Outstanding RDMA READs a QP may issue (requester side).
    pub max_qp_init_rd_atom: u8,
    pub phys_port_cnt: u8,
}

pub(crate) struct ContextInner {
    /// The library the context was opened with (loaded for the life of the process).
    pub(crate) v: &'static Verbs,
    pub(crate) ctx: *mut sys::ibv_context,
    pub(crate) name: String,
    pub(crate) caps: DeviceCaps,
}

// SAFETY: libibverbs contexts may be used from any thread and concurrently (rdma-core documents
// the verbs as thread-safe); the pointer is only closed in Drop, when no other handle exists.
unsafe impl Send for ContextInner {}
// SAFETY: see Send.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: every PD, CQ, QP and MR holds an Arc on this context, so none is left when the
        // last Arc drops: closing cannot leave a dangling resource.
        let rc = unsafe { (self.v.close_device)(self.ctx) };
        if rc != 0 {
            tracing::warn!(device = %self.name, "ibv_close_device failed: {}", io::Error::last_os_error());
        }
    }
}

/// An open RDMA device. Cheap to clone (reference-counted).
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.name)
            .finish()
    }
}

impl Context {
    /// Opens the device called `name`, or the first device when `name` is `None`.
    /// `Err(NoDevice)` when there is no device at all or no kernel support.
    pub fn open(name: Option<&str>) -> Result<Context> {
        let list = DeviceList::get()?;
        let all: Vec<(*mut sys::ibv_device, DeviceInfo)> =
            list.iter().map(|d| (d, list.info(d))).collect();
        if all.is_empty() {
            return Err(Error::NoDevice {
                reason: "libibverbs found no RDMA device".into(),
            });
        }
        let (dev, info) = match name {
            None => &all[0],
            Some(n) => {
                all.iter()
                    .find(|(_, i)| i.name == n)
                    .ok_or_else(|| Error::DeviceNotFound {
                        name: n.to_string(),
                        available: all.iter().map(|(_, i)| i.name.clone()).collect(),
                    })?
            }
        };
        let v = list.v;
        // SAFETY: `dev` is a device of `list`, which is alive here. The context keeps its own
        // reference on the device, so freeing the list afterwards is allowed.
        let ctx = unsafe { (v.open_device)(*dev) };
        if ctx.is_null() {
            return Err(Error::last_os("ibv_open_device"));
        }
        let mut attr = MaybeUninit::<sys::ibv_device_attr>::zeroed();
        // SAFETY: `ctx` is open; `attr` is a valid out-pointer of the right type.
        let rc = unsafe { (v.query_device)(ctx, attr.as_mut_ptr()) };
        if rc != 0 {
            let err = Error::errno("ibv_query_device", rc);
            // SAFETY: `ctx` was just opened and nothing else refers to it.
            unsafe { (v.close_device)(ctx) };
            return Err(err);
        }
        // SAFETY: ibv_query_device succeeded and filled the plain-data struct (zeroed before).
        let attr = unsafe { attr.assume_init() };
        let clamp_u8 = |v: c_int| u8::try_from(v.max(0)).unwrap_or(u8::MAX);
        let caps = DeviceCaps {
            max_qp_wr: u32::try_from(attr.max_qp_wr).unwrap_or(0),
            max_sge: u32::try_from(attr.max_sge).unwrap_or(0),
            max_cqe: u32::try_from(attr.max_cqe).unwrap_or(0),
            max_mr_size: attr.max_mr_size,
            max_qp_rd_atom: clamp_u8(attr.max_qp_rd_atom),
            max_qp_init_rd_atom: clamp_u8(attr.max_qp_init_rd_atom),
            phys_port_cnt: attr.phys_port_cnt,
        };
        tracing::debug!(device = %info.name, ?caps, "opened RDMA device");
        Ok(Context {
            inner: Arc::new(ContextInner {
                v,
                ctx,
                name: info.name.clone(),
                caps,
            }),
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn caps(&self) -> DeviceCaps {
        self.inner.caps
    }

    pub(crate) fn ptr(&self) -> *mut sys::ibv_context {
        self.inner.ctx
    }

    /// libibverbs' entry points.
    pub(crate) fn v(&self) -> &'static Verbs {
        self.inner.v
    }

    /// State, MTU and GID table size of `port` (ports count from 1).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let mut attr = MaybeUninit::<sys::ibv_port_attr>::zeroed();
        // SAFETY: the context is open for `self`'s lifetime; `attr` is a zeroed, correctly typed
        // out-pointer. ibv_query_port@IBVERBS_1.1 fills the compat prefix of the struct (up to
        // `flags`), as verbs.h's ___ibv_query_port does on this path.
        let rc = unsafe { (self.v().query_port)(self.ptr(), port, attr.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::errno("ibv_query_port", rc));
        }
        // SAFETY: the query succeeded; the struct is plain data and was zeroed before.
        let a = unsafe { attr.assume_init() };
        Ok(PortAttr {
            state: PortState::from_raw(a.state),
            max_mtu: Mtu::from_raw(a.max_mtu),
            active_mtu: Mtu::from_raw(a.active_mtu),
            lid: a.lid,
            gid_tbl_len: u32::try_from(a.gid_tbl_len).unwrap_or(0),
            link_layer: LinkLayer::from_raw(a.link_layer),
        })
    }

    /// Like [`Context::query_port`], but an error unless the port is ACTIVE.
    pub fn active_port(&self, port: u8) -> Result<PortAttr> {
        let attr = self.query_port(port)?;
        if attr.state != PortState::Active {
            return Err(Error::PortNotActive {
                device: self.name().to_string(),
                port,
                state: attr.state,
            });
        }
        Ok(attr)
    }

    /// One GID table entry; `Ok(None)` for an empty slot.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Option<GidEntry>> {
        let mut entry = MaybeUninit::<sys::ibv_gid_entry>::zeroed();
        // SAFETY: the context is open; `entry` is a valid out-pointer whose size is passed along.
        let rc = unsafe {
            (self.v().query_gid_ex)(
                self.ptr(),
                u32::from(port),
                index,
                entry.as_mut_ptr(),
                0,
                std::mem::size_of::<sys::ibv_gid_entry>(),
            )
        };
        if rc != 0 {
            let errno = if rc > 0 {
                rc
            } else if rc == -1 {
                io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO)
            } else {
                -rc
            };
            if errno == libc::ENODATA || errno == libc::EINVAL {
                return Ok(None);
            }
            return Err(Error::errno("ibv_query_gid_ex", errno));
        }
        // SAFETY: the call succeeded and filled the plain-data entry (zeroed before).
        let e = unsafe { entry.assume_init() };
        Ok(Some(GidEntry::from_raw(&e)))
    }

    /// The valid GID entries of `port`.
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let len = self.query_port(port)?.gid_tbl_len as usize;
        let ports = usize::from(self.caps().phys_port_cnt.max(1));
        let max = len.saturating_mul(ports).max(1);
        let mut raw: Vec<sys::ibv_gid_entry> = Vec::with_capacity(max);
        // SAFETY: the context is open; `raw` has room for `max` entries of the size passed; the
        // call writes at most `max` entries and returns how many.
        let n = unsafe {
            (self.v().query_gid_table)(
                self.ptr(),
                raw.as_mut_ptr(),
                max,
                0,
                std::mem::size_of::<sys::ibv_gid_entry>(),
            )
        };
        if n >= 0 {
            let n = (n as usize).min(max);
            // SAFETY: the call initialized the first `n` entries (plain data).
            unsafe { raw.set_len(n) };
            return Ok(raw
                .iter()
                .map(GidEntry::from_raw)
                .filter(|e| e.port == port && !e.gid.is_zero())
                .collect());
        }
        // Older kernels without the GID table ioctl: query entry by entry.
        let mut out = Vec::new();
        for index in 0..len as u32 {
            if let Some(e) = self.query_gid(port, index)? {
                if !e.gid.is_zero() {
                    out.push(e);
                }
            }
        }
        Ok(out)
    }

    /// The GID to use for RoCE v2 on `port`: type RoCE v2, not link-local. With `addr`, the GID
    /// of exactly that address (an IPv4 address matches its IPv4-mapped GID): several node
    /// processes sharing one device each bind their own address, and a GID of another address
    /// would route their traffic wrongly, so a missing one is an error, not a fallback. Without
    /// `addr`, the first IPv4-mapped GID, else the first IPv6 one.
    pub fn select_roce_v2_gid(&self, port: u8, addr: Option<IpAddr>) -> Result<GidEntry> {
        let table = self.gid_table(port)?;
        select_roce_v2(&table, addr).ok_or_else(|| Error::NoRoceV2Gid {
            device: self.name().to_string(),
            port,
            wanted: addr,
            available: table
                .iter()
                .filter(|e| e.gid_type == GidType::RoceV2)
                .map(|e| format!("[{}] {}", e.index, e.gid))
                .collect(),
        })
    }
}

/// The GID selection rule of [`Context::select_roce_v2_gid`], on a table (pure, for tests).
pub(crate) fn select_roce_v2(table: &[GidEntry], addr: Option<IpAddr>) -> Option<GidEntry> {
    let mut usable = table
        .iter()
        .filter(|e| e.gid_type == GidType::RoceV2 && !e.gid.is_zero() && !e.gid.is_link_local());
    match addr {
        Some(want) => {
            let want = canonical(want);
            usable.find(|e| e.gid.to_ip() == want).copied()
        }
        None => {
            let usable: Vec<&GidEntry> = usable.collect();
            usable
                .iter()
                .find(|e| e.gid.to_ip().is_ipv4())
                .or_else(|| usable.first())
                .map(|e| **e)
        }
    }
}

fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Port state (`ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    Nop,
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    Other(u32),
}

impl PortState {
    fn from_raw(v: u32) -> Self {
        use sys::{
            IBV_PORT_ACTIVE, IBV_PORT_ACTIVE_DEFER, IBV_PORT_ARMED, IBV_PORT_DOWN, IBV_PORT_INIT,
            IBV_PORT_NOP,
        };
        match v {
            IBV_PORT_NOP => PortState::Nop,
            IBV_PORT_DOWN => PortState::Down,
            IBV_PORT_INIT => PortState::Init,
            IBV_PORT_ARMED => PortState::Armed,
            IBV_PORT_ACTIVE => PortState::Active,
            IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            o => PortState::Other(o),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Nop => f.write_str("NOP"),
            PortState::Down => f.write_str("DOWN"),
            PortState::Init => f.write_str("INIT"),
            PortState::Armed => f.write_str("ARMED"),
            PortState::Active => f.write_str("ACTIVE"),
            PortState::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            PortState::Other(v) => write!(f, "state {v}"),
        }
    }
}

/// Path MTU (`ibv_mtu`): 256 to 4096 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    /// From the `ibv_mtu` code (1..=5); anything else reads as the smallest MTU.
    pub(crate) fn from_raw(v: u32) -> Self {
        Mtu::from_code(u8::try_from(v).unwrap_or(0)).unwrap_or(Mtu::Mtu256)
    }

    /// From the `ibv_mtu` code (1..=5).
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }

    /// The `ibv_mtu` code.
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn bytes(self) -> u32 {
        128 << self.code()
    }
}

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    Unspecified,
    InfiniBand,
    Ethernet,
    Other(u8),
}

impl LinkLayer {
    fn from_raw(v: u8) -> Self {
        match v {
            sys::IBV_LINK_LAYER_UNSPECIFIED => LinkLayer::Unspecified,
            sys::IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            sys::IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Other(v),
        }
    }
}

/// What `ibv_query_port` says about a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    pub state: PortState,
    pub max_mtu: Mtu,
    pub active_mtu: Mtu,
    pub lid: u16,
    pub gid_tbl_len: u32,
    pub link_layer: LinkLayer,
}

/// A 128-bit GID. For RoCE it is an IPv6 address (IPv4-mapped for an IPv4 address).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// fe80::/10.
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && (self.0[1] & 0xc0) == 0x80
    }

    /// The address this GID stands for (IPv4 for an IPv4-mapped GID).
    pub fn to_ip(&self) -> IpAddr {
        canonical(IpAddr::V6(Ipv6Addr::from(self.0)))
    }

    /// The GID of an IP address (IPv4 as IPv4-mapped), as RoCE v2 builds it.
    pub fn from_ip(addr: IpAddr) -> Gid {
        match addr {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    pub(crate) fn to_raw(self) -> sys::ibv_gid {
        sys::ibv_gid { raw: self.0 }
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Ipv6Addr::from(self.0), f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// GID type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    Ib,
    RoceV1,
    RoceV2,
    Other(u32),
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub port: u8,
    pub gid: Gid,
    pub gid_type: GidType,
    /// Index of the network device the GID belongs to (RoCE), 0 for none.
    pub ndev_ifindex: u32,
}

impl GidEntry {
    fn from_raw(e: &sys::ibv_gid_entry) -> Self {
        // SAFETY: every bit pattern of the 16-byte union is a valid `[u8; 16]`.
        let raw = unsafe { e.gid.raw };
        GidEntry {
            index: e.gid_index,
            port: u8::try_from(e.port_num).unwrap_or(0),
            gid: Gid(raw),
            gid_type: match e.gid_type {
                sys::IBV_GID_TYPE_IB => GidType::Ib,
                sys::IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
                sys::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
                o => GidType::Other(o),
            },
            ndev_ifindex: e.ndev_ifindex,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn entry(index: u32, ip: &str, t: GidType) -> GidEntry {
        GidEntry {
            index,
            port: 1,
            gid: Gid::from_ip(ip.parse().unwrap()),
            gid_type: t,
            ndev_ifindex: 2,
        }
    }

    fn soft_roce_table() -> Vec<GidEntry> {
        // As seen on rxe0 in the Soft-RoCE VM (see SOFTROCE.md), plus a RoCE v1 twin.
        vec![
            entry(0, "fe80::5054:ff:fe12:3456", GidType::RoceV2),
            entry(1, "::ffff:10.55.0.1", GidType::RoceV1),
            entry(2, "::ffff:10.55.0.1", GidType::RoceV2),
            entry(3, "fec0::5054:ff:fe12:3456", GidType::RoceV2),
            entry(4, "::ffff:10.55.0.2", GidType::RoceV2),
        ]
    }

    #[test]
    fn selects_roce_v2_gid_of_the_wanted_address() {
        let t = soft_roce_table();
        let want = IpAddr::V4(Ipv4Addr::new(10, 55, 0, 2));
        assert_eq!(select_roce_v2(&t, Some(want)).map(|e| e.index), Some(4));
        // An IPv4-mapped IPv6 address means the same.
        let mapped: IpAddr = "::ffff:10.55.0.1".parse().unwrap();
        assert_eq!(select_roce_v2(&t, Some(mapped)).map(|e| e.index), Some(2));
        // No silent fallback to another address.
        let other = IpAddr::V4(Ipv4Addr::new(10, 55, 0, 9));
        assert_eq!(select_roce_v2(&t, Some(other)), None);
        // Link-local is never chosen, even when asked for.
        let ll: IpAddr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        assert_eq!(select_roce_v2(&t, Some(ll)), None);
    }

    #[test]
    fn selects_first_ipv4_roce_v2_gid_without_address() {
        let t = soft_roce_table();
        assert_eq!(select_roce_v2(&t, None).map(|e| e.index), Some(2));
        // Only IPv6 RoCE v2 GIDs: the first non-link-local one.
        let v6 = vec![t[0], t[3]];
        assert_eq!(select_roce_v2(&v6, None).map(|e| e.index), Some(3));
        // Only RoCE v1 and link-local: none.
        let none = vec![t[0], t[1]];
        assert_eq!(select_roce_v2(&none, None), None);
    }

    #[test]
    fn gid_formats_and_classifies() {
        let g = Gid::from_ip("10.55.0.1".parse().unwrap());
        assert_eq!(g.to_string(), "::ffff:10.55.0.1");
        assert_eq!(g.to_ip(), IpAddr::V4(Ipv4Addr::new(10, 55, 0, 1)));
        assert!(!g.is_link_local());
        assert!(Gid::from_ip("fe80::1".parse().unwrap()).is_link_local());
        assert!(Gid::default().is_zero());
    }

    #[test]
    fn mtu_codes() {
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_code(3), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::from_code(0), None);
        assert_eq!(Mtu::from_code(6), None);
        assert!(Mtu::Mtu1024 < Mtu::Mtu2048);
    }
}
