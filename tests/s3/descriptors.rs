//! Descriptors: the server raises its soft open-file limit to the hard one and sizes its
//! connection limit from it, keeping descriptors for the drives, so idle sockets cannot make
//! drive opens fail (issue 15, finding 6).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quarry_integration::*;

struct Server {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A single-node server on 4 drives started under `ulimit -S -n soft -H -n hard`.
async fn start_limited(soft: u32, hard: u32) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = dir.path().join("quarry.log");
    let f = std::fs::File::create(&log).unwrap();
    let drives: Vec<String> = (1..=4)
        .map(|i| dir.path().join(format!("d{i}")).display().to_string())
        .collect();
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -S -n {soft} && ulimit -H -n {hard} && exec \"$@\""
        ))
        .arg("sh")
        .arg(quarry_bin())
        .arg("server")
        .args(&drives)
        .arg("--address")
        .arg(format!("127.0.0.1:{port}"))
        .env("QUARRY_ROOT_USER", ACCESS_KEY)
        .env("QUARRY_ROOT_PASSWORD", SECRET_KEY)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let s = Server {
        child,
        port,
        log,
        _dir: dir,
    };
    let t0 = Instant::now();
    let url = format!("http://127.0.0.1:{port}/health/live");
    while reqwest::get(&url).await.map(|r| r.status().as_u16()).ok() != Some(200) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the server did not start:\n{}",
            std::fs::read_to_string(&s.log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s
}

/// `(soft, hard)` "Max open files" of `pid`.
fn open_file_limits(pid: u32) -> (String, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let mut f = line["Max open files".len()..].split_whitespace();
    (f.next().unwrap().into(), f.next().unwrap().into())
}

#[tokio::test]
async fn the_soft_limit_is_raised_and_idle_sockets_cannot_starve_the_drives() {
    // A soft limit below the hard one is raised to it.
    let s = start_limited(1024, 4096).await;
    assert_eq!(
        open_file_limits(s.child.id()),
        ("4096".into(), "4096".into())
    );
    drop(s);

    // With 1,024 descriptors in all, 1,100 idle sockets would take every one of them.
    let s = start_limited(1024, 1024).await;
    let c = sdk_client(
        &format!("http://127.0.0.1:{}", s.port),
        ACCESS_KEY,
        SECRET_KEY,
    );
    c.create_bucket().bucket("fds").send().await.unwrap();
    let body = random_bytes(1 << 20);
    put_bytes(&c, "fds", "before", &body).await;
    let mut idle = Vec::new();
    for _ in 0..1100 {
        if let Ok(sock) = tokio::net::TcpStream::connect(("127.0.0.1", s.port)).await {
            idle.push(sock);
        }
    }
    // Let the server accept (and refuse) what it will.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The client's pooled connection still gets PUT and GET through: the drives have their
    // descriptors.
    put_bytes(&c, "fds", "during", &body).await;
    assert_eq!(get_bytes(&c, "fds", "during").await, body);
    assert_eq!(get_bytes(&c, "fds", "before").await, body);
    drop(idle);
    let log = std::fs::read_to_string(&s.log).unwrap();
    assert!(
        log.contains("does not fit the open-file limit"),
        "the server must say it lowered its limit:\n{log}"
    );
    assert!(!log.contains("Too many open files"), "{log}");
}
