//! Limits: every over-limit request gets a clear answer and the server keeps serving, without its
//! memory growing. Header blocks (hyper's defaults: the S3 front end sets no limit of its own),
//! key length (1024 bytes), user metadata (2 KiB), CompleteMultipartUpload (10000 parts, 1 MiB of
//! XML), a part declared above 5 GiB, hundreds of idle connections, and connection slots full of
//! connections that never authenticate.

use std::time::{Duration, SystemTime};

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use quarry_integration::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const BUCKET: &str = "lim";
/// How much the server's resident memory may grow over all the over-limit requests.
const RSS_BOUND_KIB: u64 = 64 * 1024;

/// The pid of the process serving `port` (the harness does not expose it): the process whose
/// command line has `--address 127.0.0.1:<port>`.
fn server_pid(port: u16) -> Option<u32> {
    let want = format!("--address\u{0}127.0.0.1:{port}\u{0}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        String::from_utf8_lossy(&cmdline)
            .contains(&want)
            .then_some(pid)
    })
}

/// VmRSS of `pid` in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix("VmRSS:")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// Writes `head` (and nothing more) on a fresh connection and reads the answer until the end of
/// an S3 error document, the end of the connection or 10 s.
async fn raw_exchange(port: u16, head: &[u8]) -> String {
    let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    // The server may answer and close before it read everything: a failed write is fine.
    let _ = sock.write_all(head).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&answer);
            if text.contains("</Error>") || (text.contains("\r\n\r\n") && text.contains(" 431 ")) {
                break;
            }
        }
    })
    .await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// A request head signed with UNSIGNED-PAYLOAD that declares `content_length` and sends no body.
fn signed_head(s: &TestServer, method: &str, path_and_query: &str, content_length: u64) -> String {
    let url = format!("{}{}", s.endpoint(), path_and_query);
    let signed = sign_headers(
        method,
        &url,
        &[],
        PayloadHash::Literal("UNSIGNED-PAYLOAD"),
        s.access_key(),
        s.secret_key(),
        SystemTime::now(),
    );
    let mut head = format!(
        "{method} {path_and_query} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-length: {content_length}\r\n",
        s.port()
    );
    for (k, v) in &signed.headers {
        if !k.eq_ignore_ascii_case("host") {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    head
}

/// The server still answers a normal PUT and GET.
async fn still_serving(s: &TestServer, what: &str) {
    let c = s.client();
    let data = random_bytes(1000);
    let key = format!("alive/{}", what.replace(' ', "-"));
    put_bytes(&c, BUCKET, &key, &data).await;
    assert_bytes_eq(&get_bytes(&c, BUCKET, &key).await, &data, what);
}

fn status_line(answer: &str) -> &str {
    answer.lines().next().unwrap_or("<no answer>")
}

#[tokio::test]
async fn over_limit_requests_get_clear_errors_and_the_server_keeps_serving() {
    let s = TestServer::start(4).await;
    s.create_bucket(BUCKET).await;
    let c = s.client();
    still_serving(&s, "warm up").await;
    let pid = server_pid(s.port());
    let rss_before = pid.and_then(rss_kib);
    let mut tried = 0;

    let upload = c
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("mp")
        .send()
        .await
        .expect("create multipart upload");
    let upload_id = upload.upload_id().expect("upload id").to_string();
    let upload_q = utf8_percent_encode(&upload_id, NON_ALPHANUMERIC).to_string();

    // Several rounds, so a leak per request would show in the RSS.
    for round in 0..5 {
        // Header blocks. 64 KiB in one signed header: within hyper's default buffer (~400 KiB;
        // the S3 front end sets no header limit of its own), so the server reads it and answers
        // the request as usual (404, no such key). A limit of its own would answer 431.
        let junk = "a".repeat(64 * KIB);
        let r = s
            .signed(
                "GET",
                &format!("/{BUCKET}/nothing"),
                &[("x-junk", &junk)],
                vec![],
            )
            .await;
        let st = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        if round == 0 {
            println!("limits: 64 KiB signed header block -> HTTP {st}");
        }
        assert!(
            (st == 404 && body.contains("<Code>NoSuchKey</Code>")) || st == 431,
            "64 KiB header block: want 404 NoSuchKey (accepted) or 431, got HTTP {st}: {body}"
        );
        // 1 MiB of headers, and 200 headers: over hyper's limits, 431.
        let junk = "b".repeat(MIB);
        let head = format!(
            "GET /{BUCKET}/nothing HTTP/1.1\r\nhost: 127.0.0.1:{}\r\nx-junk: {junk}\r\n\r\n",
            s.port()
        );
        let answer = raw_exchange(s.port(), head.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 431"),
            "1 MiB header block: want 431, got {:?}",
            status_line(&answer)
        );
        let mut head = format!(
            "GET /{BUCKET}/nothing HTTP/1.1\r\nhost: 127.0.0.1:{}\r\n",
            s.port()
        );
        for i in 0..200 {
            head.push_str(&format!("x-h{i}: v\r\n"));
        }
        head.push_str("\r\n");
        let answer = raw_exchange(s.port(), head.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 431"),
            "200 headers: want 431, got {:?}",
            status_line(&answer)
        );

        // Key of 1025 bytes (1024 is fine; a path segment is at most 255 bytes on disk).
        let seg = "s".repeat(200);
        let mut k1024 = [seg.as_str(); 5].join("/");
        k1024.push('/');
        k1024.push_str(&"t".repeat(1024 - k1024.len()));
        assert_eq!(k1024.len(), 1024);
        assert_s3_error(
            c.put_object()
                .bucket(BUCKET)
                .key(format!("{k1024}u"))
                .body(b"x".to_vec().into())
                .send()
                .await,
            400,
            "KeyTooLongError",
        );
        put_bytes(&c, BUCKET, &k1024, b"x").await;

        // User metadata: 2048 bytes of names and values is fine, 2049 is not.
        let ok = c
            .put_object()
            .bucket(BUCKET)
            .key("meta")
            .metadata("m", "v".repeat(2047))
            .body(b"x".to_vec().into())
            .send()
            .await;
        assert!(
            ok.is_ok(),
            "2048 bytes of metadata: {:?}",
            ok.err().map(|e| describe(&e))
        );
        assert_s3_error(
            c.put_object()
                .bucket(BUCKET)
                .key("meta")
                .metadata("m", "v".repeat(2048))
                .body(b"x".to_vec().into())
                .send()
                .await,
            400,
            "MetadataTooLarge",
        );

        // CompleteMultipartUpload naming 10001 parts (in order, under 1 MiB of XML).
        let mut xml = String::from("<CompleteMultipartUpload>");
        for n in 1..=10_001 {
            xml.push_str(&format!(
                "<Part><PartNumber>{n}</PartNumber><ETag>\"0123456789abcdef0123456789abcdef\"</ETag></Part>"
            ));
        }
        xml.push_str("</CompleteMultipartUpload>");
        assert!(
            xml.len() < MIB,
            "the 10001-part body stays under the XML limit"
        );
        let path = format!("/{BUCKET}/mp?uploadId={upload_q}");
        let r = s.signed("POST", &path, &[], xml.into_bytes()).await;
        expect_raw_error(r, 400, "MalformedXML").await;

        // An XML body over 1 MiB, sent, and only declared (refused before the body).
        let mut xml = String::from("<CompleteMultipartUpload>");
        while xml.len() <= MIB {
            xml.push_str("<!-- padding padding padding padding padding padding -->");
        }
        xml.push_str("</CompleteMultipartUpload>");
        let r = s.signed("POST", &path, &[], xml.into_bytes()).await;
        expect_raw_error(r, 400, "MalformedXML").await;
        let head = signed_head(&s, "POST", &path, MIB as u64 + 1);
        let answer = raw_exchange(s.port(), head.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 400") && answer.contains("<Code>MalformedXML</Code>"),
            "XML body declared at 1 MiB + 1: {answer}"
        );

        // A part declared above 5 GiB: refused from the headers, no body sent.
        let head = signed_head(
            &s,
            "PUT",
            &format!("/{BUCKET}/mp?partNumber=1&uploadId={upload_q}"),
            (5u64 << 30) + 1,
        );
        let answer = raw_exchange(s.port(), head.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 400") && answer.contains("<Code>EntityTooLarge</Code>"),
            "UploadPart declared at 5 GiB + 1: {answer}"
        );

        tried += 9;
        still_serving(&s, &format!("round {round}")).await;
    }
    // The upload is untouched: no part was stored.
    let parts = c
        .list_parts()
        .bucket(BUCKET)
        .key("mp")
        .upload_id(&upload_id)
        .send()
        .await
        .expect("list parts");
    assert!(parts.parts().is_empty(), "{:?}", parts.parts());

    match (pid, rss_before, pid.and_then(rss_kib)) {
        (Some(pid), Some(before), Some(after)) => {
            println!("limits: {tried} over-limit requests; server {pid} VmRSS {before} KiB -> {after} KiB");
            assert!(
                after <= before + RSS_BOUND_KIB,
                "server RSS grew from {before} KiB to {after} KiB over {tried} over-limit requests (bound {RSS_BOUND_KIB} KiB)"
            );
        }
        _ => println!("limits: {tried} over-limit requests; server pid or VmRSS not found, memory not checked"),
    }
}

#[tokio::test]
async fn hundreds_of_idle_connections_do_not_stop_the_server() {
    const CONNS: usize = 300;
    let s = TestServer::start(4).await;
    s.create_bucket(BUCKET).await;
    still_serving(&s, "before").await;
    let pid = server_pid(s.port());
    let rss_before = pid.and_then(rss_kib);

    let mut idle = Vec::with_capacity(CONNS);
    for i in 0..CONNS {
        let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", s.port()))
            .await
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        // Every third one starts a request and stalls in the middle of its headers.
        if i % 3 == 0 {
            sock.write_all(b"GET /lim/x HTTP/1.1\r\nhost: x\r\nx-slow: ")
                .await
                .expect("send a partial head");
        }
        idle.push(sock);
    }
    // A normal request while they are all open.
    let started = std::time::Instant::now();
    still_serving(&s, "with idle connections").await;
    println!(
        "limits: {CONNS} idle connections open; a PUT and GET took {:?}",
        started.elapsed()
    );
    let rss_open = pid.and_then(rss_kib);
    drop(idle);
    still_serving(&s, "after closing them").await;
    match (rss_before, rss_open, pid.and_then(rss_kib)) {
        (Some(before), Some(open), Some(after)) => {
            println!("limits: VmRSS {before} KiB, {open} KiB with {CONNS} connections, {after} KiB after");
            assert!(
                open <= before + RSS_BOUND_KIB,
                "{CONNS} idle connections took the RSS from {before} KiB to {open} KiB"
            );
        }
        _ => println!("limits: server pid or VmRSS not found, memory not checked"),
    }
}

/// Every connection slot held by connections that never authenticate (idle, or stalled in their
/// headers) does not lock out a client that signs its requests: the oldest unauthenticated
/// connection is closed to make room for each new one, and connections that authenticated stay.
#[tokio::test]
async fn unauthenticated_connections_cannot_starve_signed_clients() {
    const SLOTS: usize = 24;
    let mut s = TestServer::start_single(4).await;
    s.set_env("QUARRY_MAX_CONNECTIONS", &SLOTS.to_string());
    s.restart().await;
    s.create_bucket(BUCKET).await;
    // Control: the signed client works, and its connections have authenticated.
    still_serving(&s, "before the flood").await;

    let mut idle = Vec::with_capacity(2 * SLOTS);
    for i in 0..2 * SLOTS {
        let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", s.port()))
            .await
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        if i % 2 == 0 {
            sock.write_all(b"GET /lim/x HTTP/1.1\r\nhost: x\r\nx-slow: ")
                .await
                .expect("send a partial head");
        }
        idle.push(sock);
        // Let the server accept each one in order, so "oldest" is well defined.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = std::time::Instant::now();
    still_serving(&s, "with every slot held by unauthenticated connections").await;
    println!(
        "limits: {} unauthenticated connections over {SLOTS} slots; a signed PUT and GET took {:?}",
        idle.len(),
        started.elapsed()
    );
    // The oldest of them were closed by the server (end of stream or reset), not left open.
    let mut closed = 0;
    for sock in idle.iter_mut().take(SLOTS) {
        let mut b = [0u8; 1];
        match tokio::time::timeout(Duration::from_secs(2), sock.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => closed += 1,
            _ => {}
        }
    }
    assert!(
        closed >= SLOTS / 2,
        "only {closed} of the {SLOTS} oldest unauthenticated connections were closed"
    );
}

#[tokio::test]
async fn a_client_stalling_in_its_headers_is_disconnected() {
    let mut s = TestServer::start_single(4).await;
    s.set_env("QUARRY_HEADER_TIMEOUT", "2");
    s.restart().await;
    s.create_bucket("lim").await;
    let addr = format!("127.0.0.1:{}", s.port());
    // Slowloris: a request line and one header, then nothing.
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stalled
        .write_all(b"GET /health/live HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // An idle connection that never sends a byte.
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let t0 = std::time::Instant::now();
    for (what, conn) in [("stalled", &mut stalled), ("idle", &mut idle)] {
        let mut buf = [0u8; 512];
        // The server closes it (EOF, possibly after a 408) within the timeout and some slack.
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "the {what} connection was still open after 10 s"
        );
    }
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(1500),
        "closed after {waited:?}: sooner than the 2 s header timeout"
    );
    still_serving(&s, "after the header timeouts").await;
}

/// Reads from `sock` until an S3 error document, EOF or `limit`; the answer and when it came.
async fn answer_within(
    sock: &mut (impl tokio::io::AsyncRead + Unpin),
    limit: Duration,
) -> (String, Duration) {
    let t0 = std::time::Instant::now();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
            if String::from_utf8_lossy(&answer).contains("</Error>") {
                break;
            }
        }
    })
    .await;
    (String::from_utf8_lossy(&answer).into_owned(), t0.elapsed())
}

/// A body that stalls is cut off with `400 RequestTimeout` once the body timeout has passed: a
/// PUT that declares 5 GiB and sends nothing, and one that drips a byte every half second (an
/// idle timeout alone would never fire on it). The control: an upload that pauses but keeps a
/// fair rate completes, and the server serves on.
#[tokio::test]
async fn stalled_and_dripping_bodies_are_cut_off() {
    let mut s = TestServer::start_single(4).await;
    s.set_env("QUARRY_BODY_TIMEOUT", "2");
    s.restart().await;
    s.create_bucket(BUCKET).await;
    let addr = format!("127.0.0.1:{}", s.port());

    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = signed_head(&s, "PUT", "/lim/stalled", 5 * 1024 * MIB as u64);
    stalled.write_all(head.as_bytes()).await.unwrap();
    let (answer, took) = answer_within(&mut stalled, Duration::from_secs(15)).await;
    eprintln!("a 5 GiB PUT that sends nothing was cut after {took:?}");
    assert!(
        answer.contains("<Code>RequestTimeout</Code>"),
        "stalled PUT, after {took:?}: {answer:?}"
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(8),
        "cut after {took:?}, for a 2 s body timeout"
    );

    let drip = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut drip_in, mut drip_out) = drip.into_split();
    let head = signed_head(&s, "PUT", "/lim/drip", MIB as u64);
    drip_out.write_all(head.as_bytes()).await.unwrap();
    let dripper = tokio::spawn(async move {
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if drip_out.write_all(b"x").await.is_err() {
                break;
            }
        }
    });
    let (answer, took) = answer_within(&mut drip_in, Duration::from_secs(15)).await;
    dripper.abort();
    eprintln!("a body dripping 2 B/s was cut after {took:?}");
    assert!(
        answer.contains("<Code>RequestTimeout</Code>"),
        "dripping PUT, after {took:?}: {answer:?}"
    );
    assert!(took < Duration::from_secs(10), "the drip lasted {took:?}");

    // Control: 64 KiB in 8 KiB pieces with 300 ms pauses (about 27 KiB/s) is a slow but fair
    // client; it is stored.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = signed_head(&s, "PUT", "/lim/slow", 64 * KIB as u64);
    slow.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        slow.write_all(&[b'y'; 8 * KIB]).await.unwrap();
    }
    let mut answer = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), slow.read(&mut answer))
        .await
        .expect("an answer to the slow PUT")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "slow PUT: {answer}");
    still_serving(&s, "after cut-off bodies").await;
}

/// Deep XML (40,000 nested elements, 280 KB) to the operations that parse XML is `400
/// MalformedXML`, and the server lives on (the element tree's recursive drop used to overflow
/// the stack and abort the process). Control: the same operations with their normal bodies.
#[tokio::test]
async fn deep_xml_bodies_are_malformed_not_fatal() {
    let s = TestServer::start(4).await;
    s.create_bucket(BUCKET).await;
    let deep = |root: &str, depth: usize| {
        let mut d = format!("<{root}>");
        d.push_str(&"<a>".repeat(depth));
        d.push_str(&"</a>".repeat(depth));
        d.push_str(&format!("</{root}>"));
        d.into_bytes()
    };
    // (CORS bodies are limited to 64 KiB before they are parsed: 9,000 levels fit.)
    for (method, path, root, depth) in [
        ("PUT", "/deep-bucket", "CreateBucketConfiguration", 40_000),
        ("POST", "/lim?delete", "Delete", 40_000),
        ("PUT", "/lim?cors", "CORSConfiguration", 9_000),
    ] {
        let body = deep(root, depth);
        let md5 = md5_b64(&body);
        let resp = s
            .signed(method, path, &[("content-md5", md5.as_str())], body)
            .await;
        expect_raw_error(resp, 400, "MalformedXML").await;
    }
    // Unclosed, as an attacker would not bother to close it.
    let body = "<Delete>".repeat(40_000).into_bytes();
    let md5 = md5_b64(&body);
    let resp = s
        .signed(
            "POST",
            "/lim?delete",
            &[("content-md5", md5.as_str())],
            body,
        )
        .await;
    expect_raw_error(resp, 400, "MalformedXML").await;
    // Controls.
    let ok = b"<CreateBucketConfiguration><LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>".to_vec();
    let resp = s.signed("PUT", "/shallow-bucket", &[], ok).await;
    assert_eq!(
        resp.status(),
        200,
        "{}",
        resp.text().await.unwrap_or_default()
    );
    still_serving(&s, "after deep XML").await;
}

/// A browser form POST is unauthenticated until its policy is read: the bytes before the file
/// are bounded small (the fields' 64 KiB and a little), so a flood of connections each sending
/// an unterminated part header gets `400 MaxPostPreDataLengthExceededError` after ~88 KiB each
/// (it used to read 1 MiB each, and wait for it), and the server's memory stays bounded.
/// Bounded: 200 connections of 256 KiB, loopback. Control: the server serves on.
#[tokio::test]
async fn form_post_preamble_flood_is_bounded() {
    let s = TestServer::start_single(4).await;
    s.create_bucket(BUCKET).await;
    let pid = server_pid(s.port());
    let before = pid.and_then(rss_kib);
    let head = format!(
        "POST /{BUCKET} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-type: multipart/form-data; boundary=b\r\ncontent-length: {}\r\n\r\n--b\r\nContent-Disposition: form-data; name=\"key\"\r\nX-Pad: ",
        s.port(),
        100 * MIB
    );
    let pad = vec![b'p'; 256 * KIB];
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (head, pad, port) = (head.clone(), pad.clone(), s.port());
        tasks.push(tokio::spawn(async move {
            let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(&pad).await;
            let (answer, _) = answer_within(&mut sock, Duration::from_secs(20)).await;
            answer
        }));
    }
    let mut refused = 0;
    for t in tasks {
        let answer = t.await.unwrap();
        if answer.contains("<Code>MaxPostPreDataLengthExceededError</Code>") {
            refused += 1;
        } else {
            panic!("a flood connection got: {answer:?}");
        }
    }
    assert_eq!(refused, 200);
    if let (Some(before), Some(after)) = (before, pid.and_then(rss_kib)) {
        eprintln!("RSS before the POST flood {before} KiB, after {after} KiB");
        assert!(
            after.saturating_sub(before) < RSS_BOUND_KIB,
            "RSS grew from {before} KiB to {after} KiB"
        );
    }
    still_serving(&s, "after the POST flood").await;
}
