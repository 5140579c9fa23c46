//! The PUT data movement of the verbs data plane, measured two ways on a real device (inside the
//! Soft-RoCE VM: `scripts/vm/run.sh -- target/debug/examples/put_protocols`; ratios only there,
//! TCG emulation is no measure of speed):
//!
//! - `read`: the requester tells the holder where the chunk is (a small SEND standing in for the
//!   control RPC), the holder RDMA-READs it into its own buffer and answers with a small SEND —
//!   what `quarry-net` does;
//! - `send`: the holder keeps receive buffers for whole chunks posted (one per credit); the
//!   requester SENDs the chunk into one, the holder reposts it and returns the credit with a
//!   small SEND.
//!
//! Both in one process, two QPs on two GIDs of the same device (as two nodes sharing rxe0),
//! polled busily from one thread. For each chunk size and window (transfers in flight), the time
//! of `ROUNDS` transfers. The other half of the comparison is memory: `read` needs a landing
//! buffer at the holder only while a transfer runs (from one pool shared by all connections);
//! `send` pins `window` whole-chunk receive buffers per connection for as long as it lives.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use quarry_verbs::{
    Access, Completion, CompletionQueue, ConnectOptions, Context, MrBuf, Opcode, ProtectionDomain,
    QpCaps, QueuePair, RemoteBuf,
};

const PORT: u8 = 1;
const ROUNDS: usize = 32;
const SMALL: usize = 64;

struct Side {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
}

fn addr(i: usize) -> IpAddr {
    let list = std::env::var("QUARRY_VM_ADDRS").unwrap_or_else(|_| "10.55.0.1 10.55.0.2".into());
    let v: Vec<IpAddr> = list
        .split_whitespace()
        .filter_map(|a| a.parse().ok())
        .collect();
    v.get(i).or(v.first()).copied().expect("an address")
}

fn side(ctx: &Context, a: IpAddr) -> (ProtectionDomain, CompletionQueue, quarry_verbs::PreparedQp) {
    let gid = ctx.select_roce_v2_gid(PORT, Some(a)).expect("GID");
    let pd = ctx.alloc_pd().expect("PD");
    let cq = ctx.create_cq(1024).expect("CQ");
    let caps = QpCaps {
        max_send_wr: 256,
        max_recv_wr: 256,
    };
    let qp = pd.create_rc_qp(&cq, &cq, PORT, &gid, caps).expect("QP");
    (pd, cq, qp)
}

fn pair() -> (Side, Side) {
    let dev = std::env::var("QUARRY_VERBS_DEVICE").unwrap_or_else(|_| "rxe0".into());
    let (ca, cb) = (
        Context::open(Some(&dev)).expect("device"),
        Context::open(Some(&dev)).expect("device"),
    );
    let (pa, qa_cq, qa) = side(&ca, addr(0));
    let (pb, qb_cq, qb) = side(&cb, addr(1));
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let o = ConnectOptions::default();
    let qa = qa.connect(&eb, &o).expect("connect A");
    let qb = qb.connect(&ea, &o).expect("connect B");
    (
        Side {
            pd: pa,
            cq: qa_cq,
            qp: qa,
        },
        Side {
            pd: pb,
            cq: qb_cq,
            qp: qb,
        },
    )
}

fn bufs(pd: &ProtectionDomain, n: usize, size: usize, access: Access) -> Vec<MrBuf> {
    pd.alloc_region(n * size, access)
        .expect("region")
        .into_bufs(size)
        .expect("bufs")
}

/// Polls both CQs, handing each completion to its side, until the requester's handler says done.
fn drive(
    a: &Side,
    b: &Side,
    mut on_a: impl FnMut(Completion) -> bool,
    mut on_b: impl FnMut(Completion),
) {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        out.clear();
        b.cq.poll(&mut out, 16).expect("poll B");
        for c in out.drain(..) {
            c.result().expect("B completion ok");
            on_b(c);
        }
        a.cq.poll(&mut out, 16).expect("poll A");
        for c in out.drain(..) {
            c.result().expect("A completion ok");
            if on_a(c) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "stuck");
    }
}

/// `read`: request (small SEND) -> holder RDMA READ -> answer (small SEND), `window` in flight.
fn read_protocol(a: &Side, b: &Side, size: usize, window: usize) -> Duration {
    let src = bufs(
        &a.pd,
        window,
        size,
        Access::REMOTE_READ | Access::LOCAL_WRITE,
    );
    let remotes: Vec<RemoteBuf> = src.iter().map(MrBuf::remote).collect();
    let mut a_small = bufs(&a.pd, 2 * window, SMALL, Access::LOCAL_WRITE);
    let mut b_small = bufs(&b.pd, 2 * window, SMALL, Access::LOCAL_WRITE);
    let mut dst = bufs(&b.pd, window, size, Access::LOCAL_WRITE);
    // Receives for requests (B) and answers (A).
    for _ in 0..window {
        a.qp.post_recv(a_small.pop().unwrap()).expect("recv A");
        b.qp.post_recv(b_small.pop().unwrap()).expect("recv B");
    }
    let t0 = Instant::now();
    let (mut sent, mut done) = (0usize, 0usize);
    let post_request = |a_small: &mut Vec<MrBuf>, i: usize| {
        let buf = a_small.pop().expect("a small buffer");
        a.qp.post_send(buf, 16, Some(i as u32)).expect("request");
    };
    while sent < window.min(ROUNDS) {
        post_request(&mut a_small, sent % window);
        sent += 1;
    }
    drive(
        a,
        b,
        |c| {
            match c.opcode {
                Opcode::Recv => {
                    // An answer: the slot is free for the next request.
                    a.qp.post_recv(c.buf.expect("recv buffer"))
                        .expect("repost A");
                    done += 1;
                    if sent < ROUNDS {
                        post_request(&mut a_small, sent % window);
                        sent += 1;
                    }
                }
                _ => a_small.push(c.buf.expect("send buffer")),
            }
            done == ROUNDS
        },
        |c| match c.opcode {
            Opcode::Recv => {
                let slot = c.imm.expect("slot") as usize;
                b.qp.post_recv(c.buf.expect("recv buffer"))
                    .expect("repost B");
                let d = dst.pop().expect("a landing buffer");
                b.qp.post_read(d, size, remotes[slot]).expect("RDMA READ");
            }
            Opcode::RdmaRead => {
                dst.push(c.buf.expect("read buffer"));
                let ans = b_small.pop().expect("a small buffer");
                b.qp.post_send(ans, 8, None).expect("answer");
            }
            _ => b_small.push(c.buf.expect("send buffer")),
        },
    );
    t0.elapsed()
}

/// `send`: the chunk SENT into a pre-posted receive of `size`, the credit returned by a small
/// SEND, `window` credits.
fn send_protocol(a: &Side, b: &Side, size: usize, window: usize) -> Duration {
    let mut src = bufs(&a.pd, window, size, Access::LOCAL_WRITE);
    let mut a_small = bufs(&a.pd, window, SMALL, Access::LOCAL_WRITE);
    let mut b_small = bufs(&b.pd, window, SMALL, Access::LOCAL_WRITE);
    for b_buf in bufs(&b.pd, window, size, Access::LOCAL_WRITE) {
        b.qp.post_recv(b_buf).expect("recv B (a chunk per credit)");
    }
    for _ in 0..window {
        a.qp.post_recv(a_small.pop().unwrap()).expect("recv A");
    }
    let t0 = Instant::now();
    let (mut sent, mut done) = (0usize, 0usize);
    while sent < window.min(ROUNDS) {
        a.qp.post_send(src.pop().unwrap(), size, None)
            .expect("chunk");
        sent += 1;
    }
    let mut spare: Vec<MrBuf> = Vec::new();
    drive(
        a,
        b,
        |c| {
            match c.opcode {
                Opcode::Recv => {
                    a.qp.post_recv(c.buf.expect("recv buffer"))
                        .expect("repost A");
                    done += 1;
                    if sent < ROUNDS {
                        let s = spare.pop().expect("a chunk buffer back");
                        a.qp.post_send(s, size, None).expect("chunk");
                        sent += 1;
                    }
                }
                _ => spare.push(c.buf.expect("send buffer")),
            }
            done == ROUNDS
        },
        |c| match c.opcode {
            Opcode::Recv => {
                b.qp.post_recv(c.buf.expect("chunk buffer"))
                    .expect("repost B");
                let credit = b_small.pop().expect("a small buffer");
                b.qp.post_send(credit, 8, None).expect("credit");
            }
            _ => b_small.push(c.buf.expect("send buffer")),
        },
    );
    t0.elapsed()
}

/// One protocol run on a fresh pair of QPs (receives left posted by one run must not meet the
/// other's sends).
fn run(f: fn(&Side, &Side, usize, usize) -> Duration, size: usize, window: usize) -> Duration {
    let (a, b) = pair();
    f(&a, &b, size, window)
}

fn main() {
    // Warm up both paths once.
    run(read_protocol, 64 * 1024, 2);
    run(send_protocol, 64 * 1024, 2);
    println!("{ROUNDS} transfers each; size_bytes window read_ms send_ms read/send");
    for size in [128 * 1024, 512 * 1024 + 32, (1 << 20) + 32] {
        for window in [1, 4] {
            let r = run(read_protocol, size, window);
            let s = run(send_protocol, size, window);
            println!(
                "{size} {window} {:.1} {:.1} {:.2}",
                r.as_secs_f64() * 1e3,
                s.as_secs_f64() * 1e3,
                r.as_secs_f64() / s.as_secs_f64(),
            );
        }
    }
}
