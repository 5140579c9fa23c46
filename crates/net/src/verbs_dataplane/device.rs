//! [`VerbsDevice`]: one node's open device, its protection domain and the GID its queue pairs use.

use super::*;

/// One node's open device: context, protection domain and the GID its queue pairs use.
#[derive(Debug, Clone)]
pub struct VerbsDevice {
    ctx: Context,
    pd: ProtectionDomain,
    gid: GidEntry,
}

impl VerbsDevice {
    /// Opens `device` (or the first one) and takes GID `gid_index` of port 1 when given (it must
    /// be filled), else the RoCE v2 GID of `addr` (any RoCE v2 GID when `addr` is `None`).
    pub fn open(
        device: Option<&str>,
        addr: Option<IpAddr>,
        gid_index: Option<u32>,
    ) -> quarry_verbs::Result<VerbsDevice> {
        let ctx = Context::open(device)?;
        ctx.active_port(RDMA_PORT)?;
        let gid = match gid_index {
            Some(i) => ctx.query_gid(RDMA_PORT, i)?.ok_or_else(|| {
                quarry_verbs::Error::InvalidArgument(format!(
                    "GID index {i} of {} port {RDMA_PORT} is empty",
                    ctx.name()
                ))
            })?,
            None => ctx.select_roce_v2_gid(RDMA_PORT, addr)?,
        };
        let pd = ctx.alloc_pd()?;
        Ok(VerbsDevice { ctx, pd, gid })
    }

    pub fn name(&self) -> &str {
        self.ctx.name()
    }

    /// The protection domain every pool of this node is registered with.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The GID (index, address, type) this node's queue pairs use.
    pub fn gid(&self) -> &GidEntry {
        &self.gid
    }

    /// A CQ (registered with tokio) and a prepared RC QP on it.
    pub(super) fn qp(
        &self,
        depth: u32,
    ) -> quarry_verbs::Result<(AsyncCompletionQueue, quarry_verbs::PreparedQp)> {
        let cq = self.ctx.create_cq(depth * 2 + 8)?;
        let caps = QpCaps {
            max_send_wr: depth + 4,
            max_recv_wr: depth + 4,
        };
        let qp = self.pd.create_rc_qp(&cq, &cq, RDMA_PORT, &self.gid, caps)?;
        Ok((AsyncCompletionQueue::new(cq)?, qp))
    }
}
