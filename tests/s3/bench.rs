//! `quarry-bench` against a real server: every mode runs clean for a couple of seconds with its
//! bodies verified and its JSON report well formed, `compare` reads two reports, and a GET body
//! changed behind the benchmark's back is caught as a verification error.
//!
//! The binary is `$QUARRY_BENCH_BIN`, else `quarry-bench` beside `$QUARRY_BIN`, else
//! `<workspace>/target/debug/quarry-bench` (`cargo build -p quarry-bench`; scripts/test builds it).

use std::path::PathBuf;
use std::process::Output;

use quarry_integration::aws_sdk_s3::primitives::ByteStream;
use quarry_integration::*;
use serde_json::Value;

fn bench_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("QUARRY_BENCH_BIN") {
        return PathBuf::from(p);
    }
    quarry_bin().with_file_name("quarry-bench")
}

/// Starts quarry-bench with the server's address and credentials and `--json`.
fn spawn_bench(s: &TestServer, mode: &str, extra: &[&str]) -> tokio::process::Child {
    let bin = bench_bin();
    assert!(
        bin.is_file(),
        "{} not found: run `cargo build -p quarry-bench` first",
        bin.display()
    );
    let host = format!("127.0.0.1:{}", s.port());
    let mut args = vec![
        mode,
        "--host",
        &host,
        "--access-key",
        s.access_key(),
        "--secret-key",
        s.secret_key(),
        "--json",
    ];
    args.extend_from_slice(extra);
    tokio::process::Command::new(&bin)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run quarry-bench")
}

async fn run_bench(s: &TestServer, mode: &str, extra: &[&str]) -> Output {
    let child = spawn_bench(s, mode, extra);
    child
        .wait_with_output()
        .await
        .expect("wait for quarry-bench")
}

fn report(out: &Output, what: &str) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not a JSON report ({e}); exit {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The fields every report has, with their types.
fn check_shape(r: &Value, mode: &str) {
    assert_eq!(r["format"], 1);
    assert_eq!(r["tool"], "quarry-bench");
    assert_eq!(r["mode"], mode);
    for f in ["duration_s", "ops_per_sec", "mib_per_sec"] {
        assert!(
            r[f].as_f64().is_some_and(|v| v >= 0.0),
            "{mode}: {f} in {r}"
        );
    }
    for f in [
        "total_ops",
        "total_bytes",
        "errors",
        "verify_errors",
        "objects",
        "obj_size",
    ] {
        assert!(r[f].as_u64().is_some(), "{mode}: {f} in {r}");
    }
    assert!(r["hosts"].is_array() && r["error_samples"].is_array());
    let ops = r["operations"].as_array().expect("operations");
    assert!(!ops.is_empty(), "{mode}: no operations in {r}");
    for o in ops {
        assert!(o["op"].is_string() && o["count"].as_u64().is_some());
        if o["count"].as_u64() > Some(0) {
            let l = &o["latency_ms"];
            for p in ["mean", "p50", "p90", "p99", "max"] {
                assert!(
                    l[p].as_f64().is_some_and(|v| v > 0.0),
                    "{mode}: latency {p} in {o}"
                );
            }
            assert!(
                l["p50"].as_f64() <= l["p99"].as_f64() && l["p99"].as_f64() <= l["max"].as_f64()
            );
        }
    }
}

fn op<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["operations"]
        .as_array()
        .and_then(|ops| ops.iter().find(|o| o["op"] == name))
        .unwrap_or_else(|| panic!("no {name} in {r}"))
}

#[tokio::test]
async fn every_mode_runs_clean_and_cleans_up() {
    let s = TestServer::start(4).await;
    let common = [
        "--duration",
        "2s",
        "--concurrent",
        "3",
        "--obj.size",
        "4KiB",
        "--objects",
        "24",
    ];
    let modes: [(&str, &[&str], &[&str]); 6] = [
        ("put", &[], &["PUT"]),
        ("get", &["--obj.randsize"], &["GET"]),
        ("mixed", &[], &["GET", "STAT", "PUT", "DELETE"]),
        ("list", &[], &["LIST"]),
        ("delete", &["--batch", "5"], &["DELETE"]),
        (
            "multipart",
            &["--parts", "1", "--part.size", "64KiB"],
            &["CREATE", "PART", "COMPLETE"],
        ),
    ];
    // All modes at once (each under its own prefix): the children run while we wait on each.
    let children: Vec<_> = modes
        .iter()
        .map(|(mode, extra, _)| {
            let mut args = common.to_vec();
            args.extend_from_slice(extra);
            spawn_bench(&s, mode, &args)
        })
        .collect();
    let mut outputs = Vec::new();
    for child in children {
        outputs.push(
            child
                .wait_with_output()
                .await
                .expect("wait for quarry-bench"),
        );
    }
    let mut reports = Vec::new();
    for ((mode, _, ops), out) in modes.iter().zip(&outputs) {
        let r = report(out, mode);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{mode}: exit status; stderr: {}\n{r}",
            String::from_utf8_lossy(&out.stderr)
        );
        check_shape(&r, mode);
        assert_eq!(r["errors"], 0, "{mode}: {r}");
        assert_eq!(r["verify_errors"], 0, "{mode}: {r}");
        for name in *ops {
            if *mode == "mixed" && *name == "DELETE" {
                continue; // 10% of a short run may be none
            }
            assert!(
                op(&r, name)["count"].as_u64() > Some(0),
                "{mode}: no {name} done: {r}"
            );
        }
        reports.push(r);
    }
    // Bytes moved are what the operations say: PUT and GET count object bytes.
    let put = op(&reports[0], "PUT");
    assert_eq!(
        put["bytes"].as_u64(),
        put["count"].as_u64().map(|c| c * 4096)
    );
    assert!(op(&reports[1], "GET")["ttfb_ms"]["p50"].as_f64().is_some());
    // Capped by --objects: put creates at most 24, delete removes all 24 in batches of 5.
    assert!(put["count"].as_u64() <= Some(24));
    assert_eq!(op(&reports[4], "DELETE")["count"], 5);

    // Every run removed its objects and uploads.
    let c = s.client();
    let left = c
        .list_objects_v2()
        .bucket("quarry-bench")
        .send()
        .await
        .unwrap();
    assert_eq!(
        left.key_count(),
        Some(0),
        "objects left: {:?}",
        left.contents()
    );
    let uploads = c
        .list_multipart_uploads()
        .bucket("quarry-bench")
        .send()
        .await
        .unwrap();
    assert!(uploads.uploads().is_empty());

    // `compare` reads two reports and prints their ratios.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    std::fs::write(&a, &outputs[1].stdout).unwrap();
    std::fs::write(&b, &outputs[1].stdout).unwrap();
    let out = tokio::process::Command::new(bench_bin())
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("GET") && l.contains("1.000x")),
        "{text}"
    );
    std::fs::write(&b, b"{}").unwrap();
    let out = tokio::process::Command::new(bench_bin())
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Objects overwritten (same size, other bytes) while `get` runs: the bodies no longer match
/// what the benchmark wrote, and it must say so: verification errors, exit status 1.
#[tokio::test]
async fn wrong_get_bodies_are_errors() {
    let s = TestServer::start(4).await;
    let bucket = "verify";
    s.create_bucket(bucket).await;
    let args = [
        "--bucket",
        bucket,
        "--objects",
        "6",
        "--obj.size",
        "4KiB",
        "--concurrent",
        "2",
        "--duration",
        "4s",
    ];
    let bench = run_bench(&s, "get", &args);
    let c = s.client();
    let overwrite = async {
        let mut done = std::collections::HashSet::new();
        let other = random_bytes(4096);
        while done.len() < 6 {
            let page = c.list_objects_v2().bucket(bucket).send().await.unwrap();
            for o in page.contents() {
                let key = o.key().unwrap().to_owned();
                if done.insert(key.clone()) {
                    c.put_object()
                        .bucket(bucket)
                        .key(&key)
                        .body(ByteStream::from(other.clone()))
                        .send()
                        .await
                        .unwrap();
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    let (out, ()) = tokio::join!(bench, overwrite);
    let r = report(&out, "get");
    check_shape(&r, "get");
    assert_eq!(out.status.code(), Some(1), "{r}");
    let verify = r["verify_errors"].as_u64().unwrap();
    assert!(verify > 0, "{r}");
    assert_eq!(op(&r, "GET")["verify_errors"].as_u64(), Some(verify));
    let samples = r["error_samples"].as_array().unwrap();
    assert!(
        samples.iter().any(|e| e
            .as_str()
            .is_some_and(|e| e.contains("wrong byte at offset"))),
        "{r}"
    );
}

/// `--tls`: against an HTTPS server with a private CA, `--cacert` and `--insecure` both run clean;
/// with neither (the system's roots) the certificate is refused, as it is with `--insecure`
/// left out.
#[tokio::test]
async fn tls_runs_with_the_ca_or_insecure_and_refuses_an_unknown_certificate() {
    let s = TestServer::start_https(4).await;
    let ca = s.root().join("ca.crt");
    std::fs::write(&ca, s.tls().unwrap().ca_pem()).unwrap();
    let ca = ca.to_str().unwrap().to_owned();
    let run = [
        "--duration",
        "1s",
        "--concurrent",
        "2",
        "--obj.size",
        "64KiB",
    ];
    for extra in [
        vec!["--tls", "--cacert", ca.as_str()],
        vec!["--tls", "--insecure"],
    ] {
        let args: Vec<&str> = extra.iter().copied().chain(run).collect();
        let out = run_bench(&s, "put", &args).await;
        let r = report(&out, &format!("put {extra:?}"));
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(r["total_ops"].as_u64().unwrap_or(0) > 0, "{extra:?}: {r}");
        assert_eq!(r["errors"].as_u64(), Some(0), "{extra:?}: {r}");
    }
    let args: Vec<&str> = ["--tls"].into_iter().chain(run).collect();
    let out = run_bench(&s, "put", &args).await;
    assert!(!out.status.success(), "an unknown certificate was accepted");
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(
        err.contains("certificate") || err.contains("issuer"),
        "{err}"
    );
}
