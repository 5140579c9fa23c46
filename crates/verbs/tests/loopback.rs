//! The real verbs path, on Soft-RoCE inside the VM: `scripts/vm/verbs-tests.sh` builds this
//! binary on the host, boots the VM (rxe0 on eth0 with several addresses) and runs it there with
//! `--include-ignored` and QUARRY_VERBS_TEST=1. Elsewhere the tests are reported as ignored, with
//! the reason; run with `--include-ignored` but without the variable, each says it skipped.
//!
//! Two RC QPs in one process, each with the GID of its own address (as two node processes sharing
//! rxe0 do), connected through the encoded `QpEndpoint` exchange.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use quarry_verbs::{
    Access, AsyncCompletionQueue, Completion, CompletionQueue, ConnectOptions, Context, Error,
    MrBuf, Opcode, ProtectionDomain, QpCaps, QpEndpoint, QpState, QueuePair, WcStatus,
};

const PORT: u8 = 1;

fn enabled(test: &str) -> bool {
    if std::env::var_os("QUARRY_VERBS_TEST").is_some() {
        return true;
    }
    eprintln!(
        "SKIPPED {test}: no RDMA device here; run scripts/vm/verbs-tests.sh \
         (runs these tests in the Soft-RoCE VM with QUARRY_VERBS_TEST=1)"
    );
    false
}

fn addrs() -> (IpAddr, IpAddr) {
    let list = std::env::var("QUARRY_VM_ADDRS").unwrap_or_else(|_| "10.55.0.1 10.55.0.2".into());
    let mut it = list
        .split_whitespace()
        .map(|a| a.parse::<IpAddr>().expect("address"));
    let a = it.next().expect("first address");
    let b = it.next().unwrap_or(a);
    (a, b)
}

/// One side, as one node process would have it: its own device context, PD, CQ (for sends and
/// receives) and QP.
struct Side {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
}

struct Pair {
    a: Side,
    b: Side,
}

fn device() -> Context {
    let name = std::env::var("QUARRY_VERBS_DEVICE").unwrap_or_else(|_| "rxe0".into());
    let ctx = Context::open(Some(&name)).expect("open the RDMA device");
    let port = ctx.active_port(PORT).expect("port 1 active");
    assert_eq!(
        port.active_mtu.bytes(),
        1024,
        "Soft-RoCE on a 1500-byte NIC"
    );
    ctx
}

/// Two connected QPs; `before_connect` runs on B's prepared QP (to post receives early).
fn pair_with(before_connect: impl FnOnce(&quarry_verbs::PreparedQp)) -> Pair {
    // Two device contexts, as two node processes sharing rxe0 would have, each with the GID of
    // its own address.
    let (ctx_a, ctx_b) = (device(), device());
    let (addr_a, addr_b) = addrs();
    let gid_a = ctx_a
        .select_roce_v2_gid(PORT, Some(addr_a))
        .expect("GID of A");
    let gid_b = ctx_b
        .select_roce_v2_gid(PORT, Some(addr_b))
        .expect("GID of B");
    assert_eq!(gid_a.gid.to_ip(), addr_a);
    assert_eq!(gid_b.gid.to_ip(), addr_b);
    let (pd_a, pd_b) = (
        ctx_a.alloc_pd().expect("PD A"),
        ctx_b.alloc_pd().expect("PD B"),
    );
    let cq_a = ctx_a.create_cq(256).expect("CQ A");
    let cq_b = ctx_b.create_cq(256).expect("CQ B");
    let caps = QpCaps {
        max_send_wr: 32,
        max_recv_wr: 32,
    };
    let qa = pd_a
        .create_rc_qp(&cq_a, &cq_a, PORT, &gid_a, caps)
        .expect("QP A");
    let qb = pd_b
        .create_rc_qp(&cq_b, &cq_b, PORT, &gid_b, caps)
        .expect("QP B");
    before_connect(&qb);
    // The out-of-band exchange, through the wire format.
    let ea = QpEndpoint::decode(&qa.endpoint().encode()).expect("decode A");
    let eb = QpEndpoint::decode(&qb.endpoint().encode()).expect("decode B");
    assert_eq!(ea.gid, gid_a.gid);
    assert_eq!(eb.gid, gid_b.gid);
    let opts = ConnectOptions::default();
    let qa = qa.connect(&eb, &opts).expect("connect A");
    let qb = qb.connect(&ea, &opts).expect("connect B");
    assert_eq!(qa.state().unwrap(), QpState::ReadyToSend);
    assert_eq!(qb.state().unwrap(), QpState::ReadyToSend);
    assert_eq!(qa.remote_endpoint(), Some(eb));
    Pair {
        a: Side {
            pd: pd_a,
            cq: cq_a,
            qp: qa,
        },
        b: Side {
            pd: pd_b,
            cq: cq_b,
            qp: qb,
        },
    }
}

fn pair() -> Pair {
    pair_with(|_| {})
}

/// Busy-polls `cq` until `n` completions arrived (or panics after a while).
fn wait(cq: &CompletionQueue, n: usize) -> Vec<Completion> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    while out.len() < n {
        let want = n - out.len();
        cq.poll(&mut out, want).expect("poll");
        if out.len() < n {
            assert!(
                Instant::now() < deadline,
                "timed out: {} of {n} completions: {out:?}",
                out.len()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    out
}

fn region(pd: &ProtectionDomain, len: usize, access: Access) -> MrBuf {
    pd.alloc_region(len, access).expect("register").into_buf()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn send_recv() {
    if !enabled("send_recv") {
        return;
    }
    let p = pair_with(|_| {});
    let recv = region(&p.b.pd, 4096, Access::LOCAL_WRITE);
    p.b.qp.post_recv(recv).expect("post recv");
    let mut send = region(&p.a.pd, 4096, Access::LOCAL_READ);
    let msg = pattern(1, 3000);
    send.as_mut_slice()[..3000].copy_from_slice(&msg);
    let id = p.a.qp.post_send(send, 3000, Some(7)).expect("post send");

    let sent = wait(&p.a.cq, 1);
    assert_eq!(sent[0].wr_id, id);
    sent[0].result().expect("send ok");
    assert_eq!(sent[0].opcode, Opcode::Send);
    assert_eq!(
        sent[0].buf.as_ref().map(|b| b.len()),
        Some(4096),
        "send buffer handed back"
    );

    let got = wait(&p.b.cq, 1);
    let c = &got[0];
    c.result().expect("recv ok");
    assert_eq!(c.opcode, Opcode::Recv);
    assert_eq!(c.byte_len, 3000);
    assert_eq!(c.imm, Some(7));
    assert_eq!(c.qp_num, p.b.qp.qpn());
    let buf = c.buf.as_ref().expect("recv buffer handed back");
    assert_eq!(&buf.as_slice()[..3000], &msg[..]);
    assert_eq!(p.a.qp.in_flight() + p.b.qp.in_flight(), 0);
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn send_before_connect_receive_and_many_messages() {
    if !enabled("send_before_connect_receive_and_many_messages") {
        return;
    }
    // Receives posted in INIT, before the peer can send.
    let p = pair_with(|qb| {
        for _ in 0..16 {
            qb.post_recv(region(qb.pd(), 1024, Access::LOCAL_WRITE))
                .expect("post early recv");
        }
    });
    assert_eq!(p.b.qp.in_flight(), 16);
    // 16 SENDs of 1 KiB from buffers cut out of one region.
    let bufs =
        p.a.pd
            .alloc_region(16 * 1024, Access::LOCAL_READ)
            .unwrap()
            .into_bufs(1024)
            .unwrap();
    assert_eq!(bufs.len(), 16);
    for (i, mut b) in bufs.into_iter().enumerate() {
        b.as_mut_slice().copy_from_slice(&pattern(i as u8, 1024));
        p.a.qp
            .post_send(b, 1024, Some(i as u32))
            .expect("post send");
    }
    let sent = wait(&p.a.cq, 16);
    assert!(sent.iter().all(|c| c.is_ok()));
    let mut got = wait(&p.b.cq, 16);
    // RC delivers in order: receives complete in the order the sends were posted.
    for (i, c) in got.iter_mut().enumerate() {
        c.result().unwrap();
        assert_eq!(c.imm, Some(i as u32));
        assert_eq!(
            c.buf.as_ref().unwrap().as_slice(),
            &pattern(i as u8, 1024)[..]
        );
    }
    // The returned send buffers join back into the whole region.
    let mut returned: Vec<MrBuf> = sent.into_iter().filter_map(|c| c.buf).collect();
    returned.sort_by_key(|b| b.region_offset());
    let whole = returned
        .into_iter()
        .reduce(|acc, b| acc.join(b).expect("adjacent"))
        .unwrap();
    assert_eq!(whole.len(), 16 * 1024);
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn write_with_immediate_and_read() {
    if !enabled("write_with_immediate_and_read") {
        return;
    }
    let p = pair();
    // B exposes 64 KiB for remote write and read.
    let mut target = region(
        &p.b.pd,
        64 * 1024,
        Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let remote = target.remote_range(4096..4096 + 10_000).unwrap();
    p.b.qp.post_recv_empty().expect("recv for the immediate");

    let mut src = region(&p.a.pd, 16 * 1024, Access::LOCAL_READ);
    let data = pattern(9, 10_000);
    src.as_mut_slice()[..10_000].copy_from_slice(&data);
    p.a.qp
        .post_write(src, 10_000, remote, Some(0xdead_beef))
        .expect("post write");
    wait(&p.a.cq, 1)[0].result().expect("write ok");
    let imm = wait(&p.b.cq, 1);
    imm[0].result().expect("imm ok");
    assert_eq!(imm[0].opcode, Opcode::RecvRdmaWithImm);
    assert_eq!(imm[0].imm, Some(0xdead_beef));
    assert_eq!(imm[0].byte_len, 10_000);
    assert!(imm[0].buf.is_none());
    // RC ordering: the bytes are in place once the immediate is seen.
    assert_eq!(&target.as_slice()[4096..14_096], &data[..]);
    assert!(
        target.as_slice()[..4096].iter().all(|&b| b == 0),
        "nothing written before"
    );
    assert!(
        target.as_slice()[14_096..].iter().all(|&b| b == 0),
        "nothing written after"
    );

    // A plain RDMA WRITE: B sees nothing; A's completion means B's side has acknowledged the
    // data, so it is in place.
    let mut src = region(&p.a.pd, 8192, Access::LOCAL_READ);
    let plain = pattern(3, 5000);
    src.as_mut_slice()[..5000].copy_from_slice(&plain);
    let to = target.remote_range(20_000..25_000).unwrap();
    p.a.qp
        .post_write(src, 5000, to, None)
        .expect("post plain write");
    let done = wait(&p.a.cq, 1);
    done[0].result().expect("plain write ok");
    assert_eq!(&target.as_slice()[20_000..25_000], &plain[..]);
    let mut none = Vec::new();
    p.b.cq.poll(&mut none, 4).unwrap();
    assert!(
        none.is_empty(),
        "a plain write consumes no receive: {none:?}"
    );

    // A zero-length WRITE WITH IMMEDIATE (an empty chunk) still delivers its immediate.
    p.b.qp.post_recv_empty().unwrap();
    let src = done.into_iter().next().and_then(|c| c.buf).unwrap();
    p.a.qp
        .post_write(src, 0, to.slice(0, 0).unwrap(), Some(5))
        .expect("post empty write");
    wait(&p.a.cq, 1)[0].result().expect("empty write ok");
    let imm = wait(&p.b.cq, 1);
    imm[0].result().unwrap();
    assert_eq!(
        (imm[0].opcode, imm[0].imm, imm[0].byte_len),
        (Opcode::RecvRdmaWithImm, Some(5), 0)
    );

    // RDMA READ of another part of B's region into A's buffer.
    let fresh = pattern(77, 8000);
    target.as_mut_slice()[32_768..40_768].copy_from_slice(&fresh);
    let dst = region(&p.a.pd, 8192, Access::LOCAL_WRITE);
    let from = target.remote_range(32_768..40_768).unwrap();
    p.a.qp.post_read(dst, 8000, from).expect("post read");
    let done = wait(&p.a.cq, 1);
    done[0].result().expect("read ok");
    assert_eq!(done[0].opcode, Opcode::RdmaRead);
    let dst = done[0].buf.as_ref().unwrap();
    assert_eq!(&dst.as_slice()[..8000], &fresh[..]);
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn bad_rkey_fails_typed_and_puts_qp_in_error() {
    if !enabled("bad_rkey_fails_typed_and_puts_qp_in_error") {
        return;
    }
    let p = pair();
    let target = region(&p.b.pd, 4096, Access::REMOTE_WRITE);
    let mut remote = target.remote();
    remote.rkey ^= 0x00ff_ff00;
    let src = region(&p.a.pd, 4096, Access::LOCAL_READ);
    p.a.qp
        .post_write(src, 1024, remote, None)
        .expect("post write");
    let c = wait(&p.a.cq, 1);
    let err = c[0].result().expect_err("a bad rkey must fail");
    match &err {
        Error::Completion(e) => {
            assert_eq!(e.status, WcStatus::RemoteAccess, "{e}");
            assert_eq!(e.opcode, Opcode::RdmaWrite);
            assert!(!e.is_flush());
        }
        other => panic!("expected a completion error, got {other:?}"),
    }
    eprintln!("bad rkey: {err}");
    assert!(
        c[0].buf.is_some(),
        "the failed request hands its buffer back"
    );
    assert_eq!(p.a.qp.state().unwrap(), QpState::Error);

    // Anything posted afterwards is flushed, and hands its buffer back too.
    let again = region(&p.a.pd, 64, Access::LOCAL_READ);
    p.a.qp
        .post_send(again, 64, None)
        .expect("post on a QP in error");
    let f = wait(&p.a.cq, 1);
    match &f[0].status {
        Err(e) => assert!(e.is_flush(), "{e}"),
        Ok(()) => panic!("send on a QP in error succeeded"),
    }
    assert_eq!(f[0].buf.as_ref().map(|b| b.len()), Some(64));
    assert_eq!(p.a.qp.in_flight(), 0);
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn set_error_flushes_and_returns_every_buffer() {
    if !enabled("set_error_flushes_and_returns_every_buffer") {
        return;
    }
    let p = pair();
    for _ in 0..8 {
        p.b.qp
            .post_recv(region(&p.b.pd, 512, Access::LOCAL_WRITE))
            .unwrap();
    }
    assert_eq!(p.b.qp.in_flight(), 8);
    assert_eq!(p.b.cq.in_flight(), 8);
    // The cancel path: error state, then drain.
    p.b.qp.set_error().unwrap();
    let flushed = wait(&p.b.cq, 8);
    assert!(flushed
        .iter()
        .all(|c| matches!(&c.status, Err(e) if e.is_flush())
            && c.buf.as_ref().map(|b| b.len()) == Some(512)));
    assert_eq!(p.b.qp.in_flight(), 0);
    assert_eq!(p.b.cq.in_flight(), 0);
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn dropping_a_qp_with_posted_buffers_releases_them_after_destroy() {
    if !enabled("dropping_a_qp_with_posted_buffers_releases_them_after_destroy") {
        return;
    }
    let p = pair();
    for _ in 0..4 {
        p.b.qp
            .post_recv(region(&p.b.pd, 256, Access::LOCAL_WRITE))
            .unwrap();
    }
    assert_eq!(p.b.cq.in_flight(), 4);
    let Pair { a, b } = p;
    drop(b.qp);
    // Destroyed: the table no longer holds its buffers, and stale completions are ignored.
    assert_eq!(b.cq.in_flight(), 0);
    let mut out = Vec::new();
    b.cq.poll(&mut out, 16).unwrap();
    assert!(out.is_empty(), "{out:?}");
    // The rest goes down in any order: PD, CQ and context outlive what uses them.
    drop((b.pd, a.qp, b.cq, a.cq, a.pd));
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn foreign_pd_buffer_and_bad_lengths_are_refused_with_the_buffer_back() {
    if !enabled("foreign_pd_buffer_and_bad_lengths_are_refused_with_the_buffer_back") {
        return;
    }
    let p = pair();
    let other_pd = p.a.pd.context().alloc_pd().unwrap();
    let foreign = region(&other_pd, 128, Access::LOCAL_WRITE);
    let e = p.a.qp.post_send(foreign, 16, None).unwrap_err();
    assert!(matches!(e.error, Error::ForeignRegion), "{e}");
    assert_eq!(e.buf.map(|b| b.len()), Some(128));

    let small = region(&p.a.pd, 128, Access::LOCAL_READ);
    let e = p.a.qp.post_send(small, 129, None).unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");
    let small = e.buf.unwrap();
    let target = region(&p.b.pd, 64, Access::REMOTE_WRITE);
    let e =
        p.a.qp
            .post_write(small, 100, target.remote(), None)
            .unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}");
    let ro = region(&p.a.pd, 64, Access::LOCAL_READ);
    let e = p.a.qp.post_recv(ro).unwrap_err();
    assert!(e.error.to_string().contains("LOCAL_WRITE"), "{e}");
    assert_eq!(p.a.qp.in_flight(), 0);
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn a_full_cq_refuses_more_requests() {
    if !enabled("a_full_cq_refuses_more_requests") {
        return;
    }
    let ctx = device();
    let (a, _) = addrs();
    let gid = ctx.select_roce_v2_gid(PORT, Some(a)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4).unwrap();
    let qp = pd
        .create_rc_qp(&cq, &cq, PORT, &gid, QpCaps::default())
        .unwrap();
    for _ in 0..4 {
        qp.post_recv(region(&pd, 64, Access::LOCAL_WRITE)).unwrap();
    }
    let e = qp
        .post_recv(region(&pd, 64, Access::LOCAL_WRITE))
        .unwrap_err();
    assert!(matches!(e.error, Error::CqFull { capacity: 4 }), "{e}");
    assert_eq!(e.buf.map(|b| b.len()), Some(64));
    assert_eq!(cq.in_flight(), 4);
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn gid_selection_and_device_info() {
    if !enabled("gid_selection_and_device_info") {
        return;
    }
    let ctx = device();
    let (a, _) = addrs();
    let table = ctx.gid_table(PORT).unwrap();
    assert!(table.len() >= 2, "{table:?}");
    let any = ctx.select_roce_v2_gid(PORT, None).unwrap();
    assert!(any.gid.to_ip().is_ipv4(), "{any:?}");
    let mine = ctx.select_roce_v2_gid(PORT, Some(a)).unwrap();
    assert_eq!(ctx.query_gid(PORT, mine.index).unwrap(), Some(mine));
    let missing: IpAddr = "10.55.0.250".parse().unwrap();
    let err = ctx.select_roce_v2_gid(PORT, Some(missing)).unwrap_err();
    assert!(matches!(err, Error::NoRoceV2Gid { .. }), "{err}");
    eprintln!("{err}");
    assert!(quarry_verbs::devices()
        .unwrap()
        .iter()
        .any(|d| d.name == ctx.name()));
    quarry_verbs::check_memlock(1 << 30).expect("ulimit -l unlimited in the VM");
}

#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn completion_channel_with_tokio_async_fd() {
    if !enabled("completion_channel_with_tokio_async_fd") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let p = pair();
        let recv_cq = AsyncCompletionQueue::new(p.b.cq.clone()).expect("register with tokio");
        let send_cq = AsyncCompletionQueue::new(p.a.cq.clone()).expect("register with tokio");
        let mut out = Vec::new();

        // Nothing in flight: waiting times out, and dropping the waiter loses nothing.
        let waited =
            tokio::time::timeout(Duration::from_millis(100), recv_cq.next(&mut out, 8)).await;
        assert!(waited.is_err(), "no completion expected yet");
        assert!(out.is_empty());

        for round in 0..10u32 {
            p.b.qp
                .post_recv(region(&p.b.pd, 256, Access::LOCAL_WRITE))
                .unwrap();
            // Send from another task after a delay, so the receiver really waits on the fd.
            let qa = p.a.qp.clone();
            let pd = p.a.pd.clone();
            let sender = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(if round % 2 == 0 { 20 } else { 0 }))
                    .await;
                let mut b = pd.alloc_region(256, Access::LOCAL_READ).unwrap().into_buf();
                b.as_mut_slice()[..4].copy_from_slice(&round.to_le_bytes());
                qa.post_send(b, 4, Some(round)).unwrap();
            });
            out.clear();
            let n = tokio::time::timeout(Duration::from_secs(10), recv_cq.next(&mut out, 8))
                .await
                .expect("completion within 10 s")
                .expect("poll");
            assert_eq!(n, 1);
            out[0].result().unwrap();
            assert_eq!(out[0].imm, Some(round));
            assert_eq!(
                &out[0].buf.as_ref().unwrap().as_slice()[..4],
                &round.to_le_bytes()
            );
            sender.await.unwrap();
            out.clear();
            tokio::time::timeout(Duration::from_secs(10), send_cq.next(&mut out, 8))
                .await
                .expect("send completion within 10 s")
                .expect("poll");
            out[0].result().unwrap();
        }
    });
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The deployment shape: two processes, each on its own address of eth0, sharing rxe0, with
/// the endpoint exchange over a byte stream (here the child's stdin/stdout). The parent exposes
/// a buffer; the child RDMA-WRITEs into it with immediate data, then SENDs a message.
#[test]
#[ignore = "needs an RDMA device: run scripts/vm/verbs-tests.sh (Soft-RoCE VM)"]
fn two_processes_on_two_addresses() {
    if std::env::var_os("QUARRY_VERBS_CHILD").is_some() {
        return child_process_side();
    }
    if !enabled("two_processes_on_two_addresses") {
        return;
    }
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    let ctx = device();
    let (addr, _) = addrs();
    let gid = ctx.select_roce_v2_gid(PORT, Some(addr)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd
        .create_rc_qp(&cq, &cq, PORT, &gid, QpCaps::default())
        .unwrap();
    qp.post_recv_empty().unwrap();
    qp.post_recv(region(&pd, 256, Access::LOCAL_WRITE)).unwrap();
    let target = region(&pd, 64 * 1024, Access::REMOTE_WRITE);
    let remote = target.remote_range(1000..1000 + 50_000).unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "two_processes_on_two_addresses",
            "--exact",
            "--include-ignored",
            "--nocapture",
        ])
        .env("QUARRY_VERBS_CHILD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child process");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let theirs = loop {
        let line = lines.next().expect("child's endpoint").expect("read");
        if let Some(h) = line.strip_prefix("ENDPOINT ") {
            break QpEndpoint::decode(&unhex(h)).expect("child's endpoint decodes");
        }
    };
    assert_ne!(
        theirs.gid, gid.gid,
        "the child uses the GID of its own address"
    );
    let qp = qp.connect(&theirs, &ConnectOptions::default()).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "{} {} {} {}",
        hex(&qp.endpoint().encode()),
        remote.addr,
        remote.rkey,
        remote.len
    )
    .unwrap();
    drop(stdin);

    let got = wait(&cq, 2);
    let status = child.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
    got[0].result().unwrap();
    assert_eq!(
        (got[0].opcode, got[0].imm),
        (Opcode::RecvRdmaWithImm, Some(0x5eed))
    );
    assert_eq!(&target.as_slice()[1000..51_000], &pattern(42, 50_000)[..]);
    got[1].result().unwrap();
    assert_eq!(got[1].opcode, Opcode::Recv);
    assert_eq!(&got[1].buf.as_ref().unwrap().as_slice()[..4], b"done");
}

fn child_process_side() {
    let ctx = device();
    let (_, addr) = addrs();
    let gid = ctx.select_roce_v2_gid(PORT, Some(addr)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd
        .create_rc_qp(&cq, &cq, PORT, &gid, QpCaps::default())
        .unwrap();
    println!("ENDPOINT {}", hex(&qp.endpoint().encode()));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    let theirs = QpEndpoint::decode(&unhex(f[0])).unwrap();
    let remote = quarry_verbs::RemoteBuf {
        addr: f[1].parse().unwrap(),
        rkey: f[2].parse().unwrap(),
        len: f[3].parse().unwrap(),
    };
    let qp = qp.connect(&theirs, &ConnectOptions::default()).unwrap();
    let mut src = region(&pd, 50_000, Access::LOCAL_READ);
    src.as_mut_slice().copy_from_slice(&pattern(42, 50_000));
    qp.post_write(src, 50_000, remote, Some(0x5eed)).unwrap();
    wait(&cq, 1)[0].result().unwrap();
    let mut msg = region(&pd, 64, Access::LOCAL_READ);
    msg.as_mut_slice()[..4].copy_from_slice(b"done");
    qp.post_send(msg, 4, None).unwrap();
    wait(&cq, 1)[0].result().unwrap();
}
