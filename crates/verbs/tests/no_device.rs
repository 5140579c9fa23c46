//! Runs everywhere: a machine without RDMA gets a typed `NoDevice`, never a panic; a machine
//! with devices gets `DeviceNotFound` for a name it does not have.

use quarry_verbs::{devices, Context, Error};

fn has_rdma_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

#[test]
fn no_device_is_a_typed_error_not_a_panic() {
    if has_rdma_devices() {
        let list = devices().expect("devices are listed");
        assert!(!list.is_empty());
        match Context::open(Some("no-such-device")) {
            Err(Error::DeviceNotFound { name, available }) => {
                assert_eq!(name, "no-such-device");
                assert!(!available.is_empty());
            }
            other => panic!("expected DeviceNotFound, got {other:?}"),
        }
        return;
    }
    // This host: no RDMA in the kernel (`rdma link` fails) or no device at all.
    match devices() {
        Ok(list) => assert!(list.is_empty(), "unexpected devices: {list:?}"),
        Err(e) => assert!(e.is_no_device(), "expected NoDevice, got {e:?}"),
    }
    for name in [None, Some("rxe0")] {
        let err = Context::open(name).expect_err("no device to open");
        assert!(err.is_no_device(), "expected NoDevice, got {err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with("no RDMA device: "), "{msg}");
        eprintln!("as expected on this host: {msg}");
    }
}
