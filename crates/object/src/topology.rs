//! Topology: which drives exist, on which nodes, and how they form erasure sets. Pure: parsed
//! from the command line or the config file, identical on every node, no IO.
//!
//! Drives are given MinIO style, as URLs with optional ellipses:
//! `http://127.0.0.1:{9001...9004}/srv/node{1...4}/d{1...4}` expands to every combination, the
//! leftmost ellipsis varying slowest. A node is a distinct `host:port`. Every node must have the
//! same number of drives. Sets of `set_size` drives are cut from the drives taken round-robin
//! across the nodes (the first drive of every node, then the second of every node, ...), so that
//! a set spans as many nodes as it can and losing one node costs each set as few drives as
//! possible.

use std::collections::HashMap;
use std::path::PathBuf;

/// The most drives in one erasure set.
pub const MAX_SET_SIZE: usize = 16;
/// The most expansions one argument may produce (guards against `{1...99999999}`).
pub const MAX_EXPANSION: usize = 4096;

/// Version of the layout fingerprint: bump when its inputs change meaning.
const LAYOUT_VERSION: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("bad ellipsis in {arg:?}: {why}")]
    Ellipsis { arg: String, why: String },
    #[error("bad drive URL {url:?}: {why}")]
    Url { url: String, why: String },
    #[error("{0}")]
    Layout(String),
}

type Result<T> = std::result::Result<T, TopologyError>;

/// One drive of the deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveEndpoint {
    /// The drive as given (after expansion), e.g. `http://127.0.0.1:9001/srv/node1/d1`.
    pub url: String,
    /// Index into [`Topology::nodes`].
    pub node: usize,
    /// Index of this drive among its node's drives (the order given).
    pub index_on_node: usize,
    /// Directory on its node.
    pub path: PathBuf,
}

/// The whole deployment: nodes, drives, sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// `host:port` of every node, in order of first appearance.
    pub nodes: Vec<String>,
    /// Every drive, in the order given.
    pub drives: Vec<DriveEndpoint>,
    /// Every set as indices into `drives`, in set position order.
    pub sets: Vec<Vec<usize>>,
    /// The drive URLs are `https://`: internode traffic runs over mutual TLS. Every drive of a
    /// deployment has the same scheme.
    pub tls: bool,
}

/// Expands the ellipses of one argument: `{a...b}` with decimal bounds (zero-padded when `a`
/// has leading zeros) or hexadecimal ones when written so (`{a...f}`). The leftmost ellipsis
/// varies slowest.
pub fn expand_ellipses(arg: &str) -> Result<Vec<String>> {
    let err = |why: &str| TopologyError::Ellipsis {
        arg: arg.to_string(),
        why: why.to_string(),
    };
    // Split into literal pieces and ranges.
    let mut pieces: Vec<Vec<String>> = Vec::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let Some(close_rel) = rest[open..].find('}') else {
            return Err(err("'{' without '}'"));
        };
        let close = open + close_rel;
        let inner = &rest[open + 1..close];
        let Some((lo, hi)) = inner.split_once("...") else {
            return Err(err("expected {FIRST...LAST}"));
        };
        pieces.push(vec![rest[..open].to_string()]);
        pieces.push(range(lo, hi).map_err(|w| err(&w))?);
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return Err(err("'}' without '{'"));
    }
    pieces.push(vec![rest.to_string()]);
    let mut out = vec![String::new()];
    for p in pieces {
        if out.len().saturating_mul(p.len()) > MAX_EXPANSION {
            return Err(err(&format!("expands to more than {MAX_EXPANSION} drives")));
        }
        out = out
            .iter()
            .flat_map(|prefix| p.iter().map(move |s| format!("{prefix}{s}")))
            .collect();
    }
    Ok(out)
}

fn range(lo: &str, hi: &str) -> std::result::Result<Vec<String>, String> {
    let hex = !lo.chars().all(|c| c.is_ascii_digit()) || !hi.chars().all(|c| c.is_ascii_digit());
    let radix = if hex { 16 } else { 10 };
    let parse = |s: &str| {
        u64::from_str_radix(s, radix).map_err(|_| {
            format!(
                "{s:?} is not a {} number",
                if hex { "hex" } else { "decimal" }
            )
        })
    };
    if lo.is_empty() || hi.is_empty() {
        return Err("empty bound".into());
    }
    let (a, b) = (parse(lo)?, parse(hi)?);
    if a > b {
        return Err(format!("{lo} is greater than {hi}"));
    }
    if b - a >= MAX_EXPANSION as u64 {
        return Err(format!("more than {MAX_EXPANSION} values"));
    }
    let width = if lo.len() > 1 && lo.starts_with('0') {
        lo.len()
    } else {
        0
    };
    Ok((a..=b)
        .map(|n| {
            if hex {
                format!("{n:0width$x}")
            } else {
                format!("{n:0width$}")
            }
        })
        .collect())
}

/// Whether arguments name drives of a cluster (URLs) rather than local directories.
pub fn is_cluster_args(args: &[String]) -> bool {
    args.iter()
        .any(|a| a.starts_with("http://") || a.starts_with("https://"))
}

/// Splits `http://host:port/path` (or `https://`) into `(https, "host:port", "/path")`.
fn parse_url(url: &str) -> Result<(bool, String, PathBuf)> {
    let err = |why: &str| TopologyError::Url {
        url: url.to_string(),
        why: why.to_string(),
    };
    let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return Err(err(
            "expected http://HOST:PORT/PATH (or https:// for internode TLS)",
        ));
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => return Err(err("no drive path after the host")),
    };
    if path.len() < 2 {
        return Err(err("no drive path after the host"));
    }
    if path.split('/').any(|s| s == "..") {
        return Err(err("'..' in the drive path"));
    }
    let (h, port) = host
        .rsplit_once(':')
        .ok_or_else(|| err("no port: give every node as HOST:PORT"))?;
    if h.is_empty() {
        return Err(err("empty host"));
    }
    port.parse::<u16>()
        .map_err(|_| err(&format!("{port:?} is not a port")))?;
    Ok((tls, host.to_ascii_lowercase(), PathBuf::from(path)))
}

impl Topology {
    /// Builds the topology from drive arguments (with ellipses). `set_size` None picks the
    /// largest size from 2 to 16 that divides the number of drives (as MinIO does).
    pub fn from_args(args: &[String], set_size: Option<usize>) -> Result<Topology> {
        let mut urls = Vec::new();
        for a in args {
            urls.extend(expand_ellipses(a)?);
        }
        if urls.is_empty() {
            return Err(TopologyError::Layout("no drives given".into()));
        }
        let mut nodes: Vec<String> = Vec::new();
        let mut node_of: HashMap<String, usize> = HashMap::new();
        let mut drives = Vec::with_capacity(urls.len());
        let mut per_node: Vec<usize> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut scheme: Option<(bool, String)> = None;
        for url in urls {
            let (tls, host, path) = parse_url(&url)?;
            match &scheme {
                None => scheme = Some((tls, url.clone())),
                Some((first, example)) if *first != tls => {
                    return Err(TopologyError::Layout(format!(
                        "drive URLs mix http:// and https:// ({example} and {url}): every drive of a deployment must use the same scheme (https:// for internode TLS)"
                    )))
                }
                Some(_) => {}
            }
            if !seen.insert((host.clone(), path.clone())) {
                return Err(TopologyError::Layout(format!("drive {url} is given twice")));
            }
            let node = *node_of.entry(host.clone()).or_insert_with(|| {
                nodes.push(host.clone());
                per_node.push(0);
                nodes.len() - 1
            });
            drives.push(DriveEndpoint {
                url,
                node,
                index_on_node: per_node[node],
                path,
            });
            per_node[node] += 1;
        }
        // Nodes on one host (several ports) share its filesystem: their drives must differ.
        let host_of = |n: usize| nodes[n].rsplit_once(':').map_or("", |(h, _)| h).to_string();
        let mut on_host = std::collections::HashSet::new();
        for d in &drives {
            if !on_host.insert((host_of(d.node), d.path.clone())) {
                return Err(TopologyError::Layout(format!(
                    "drive path {} is used by two nodes on host {}: nodes sharing a host need distinct drive directories",
                    d.path.display(),
                    host_of(d.node)
                )));
            }
        }
        if per_node.iter().any(|&n| n != per_node[0]) {
            return Err(TopologyError::Layout(format!(
                "every node must have the same number of drives; got {}",
                nodes
                    .iter()
                    .zip(&per_node)
                    .map(|(n, c)| format!("{n}: {c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if per_node[0] > MAX_SET_SIZE {
            return Err(TopologyError::Layout(format!(
                "a node serves at most {MAX_SET_SIZE} drives, not {}",
                per_node[0]
            )));
        }
        let total = drives.len();
        let size = match set_size {
            Some(s) => {
                if !(2..=MAX_SET_SIZE).contains(&s) || total % s != 0 {
                    return Err(TopologyError::Layout(format!(
                        "set size {s} must be from 2 to {MAX_SET_SIZE} and divide the {total} drives"
                    )));
                }
                s
            }
            None => (2..=MAX_SET_SIZE)
                .rev()
                .find(|s| total % s == 0)
                .ok_or_else(|| {
                    TopologyError::Layout(format!(
                        "{total} drives cannot be cut into sets of 2 to {MAX_SET_SIZE}: give a number of drives with such a divisor"
                    ))
                })?,
        };
        // Round-robin across nodes: first drive of each node, then the second, ...
        let mut order = Vec::with_capacity(total);
        for i in 0..per_node[0] {
            for n in 0..nodes.len() {
                let d = drives
                    .iter()
                    .position(|d| d.node == n && d.index_on_node == i)
                    .ok_or_else(|| TopologyError::Layout("inconsistent drive list".into()))?;
                order.push(d);
            }
        }
        let sets = order.chunks(size).map(|c| c.to_vec()).collect();
        Ok(Topology {
            nodes,
            drives,
            sets,
            tls: scheme.is_some_and(|(tls, _)| tls),
        })
    }

    /// The node `address` (the `host:port` this process listens on) is, if any. An address that
    /// binds all interfaces (`0.0.0.0:P`, `[::]:P`, `:P`) matches the one node with port P
    /// whose host is this machine's loopback or name, or else the only node with port P.
    pub fn node_of_address(&self, address: &str, hostname: Option<&str>) -> Option<usize> {
        let address = address.to_ascii_lowercase();
        if let Some(i) = self.nodes.iter().position(|n| *n == address) {
            return Some(i);
        }
        let (host, port) = address.rsplit_once(':')?;
        let any = matches!(host, "" | "0.0.0.0" | "[::]");
        let local = |h: &str| {
            matches!(h, "localhost" | "127.0.0.1" | "[::1]")
                || hostname.is_some_and(|n| n.eq_ignore_ascii_case(h))
        };
        let same_port: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].rsplit_once(':').map(|(_, p)| p) == Some(port))
            .collect();
        if !any && !local(host) {
            return None;
        }
        let locals: Vec<usize> = same_port
            .iter()
            .copied()
            .filter(|&i| local(self.nodes[i].rsplit_once(':').map_or("", |(h, _)| h)))
            .collect();
        match (locals.len(), same_port.len()) {
            (1, _) => Some(locals[0]),
            (0, 1) if any => Some(same_port[0]),
            _ => None,
        }
    }

    /// Drives per set.
    pub fn set_size(&self) -> usize {
        self.sets.first().map_or(0, |s| s.len())
    }

    /// A fingerprint of the layout: the same on every node started with the same drives and
    /// set size, different otherwise. Nodes compare it before they talk. The URL scheme is not
    /// part of it (an `https://` URL counts as its `http://` form): it says how nodes talk, not
    /// where the data is, so turning internode TLS on keeps the fingerprint (and the cluster id
    /// derived from it), and clusters running `http://` keep the one they had.
    pub fn fingerprint(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(b"quarry-layout");
        h.update(&[LAYOUT_VERSION]);
        h.update(&(self.sets.len() as u64).to_be_bytes());
        for set in &self.sets {
            h.update(&(set.len() as u64).to_be_bytes());
            for &d in set {
                let url = self.drives[d].url.to_ascii_lowercase();
                let url = match url.strip_prefix("https://") {
                    Some(rest) => format!("http://{rest}"),
                    None => url,
                };
                h.update(&(url.len() as u64).to_be_bytes());
                h.update(url.as_bytes());
            }
        }
        *h.finalize().as_bytes()
    }

    /// A short, printable form of the fingerprint, for logs and errors.
    pub fn fingerprint_hex(&self) -> String {
        hex::encode(&self.fingerprint()[..8])
    }

    /// The drives of `node`, in the order given.
    pub fn drives_of(&self, node: usize) -> Vec<usize> {
        (0..self.drives.len())
            .filter(|&d| self.drives[d].node == node)
            .collect()
    }

    /// The nodes holding drives of set `s`, each once, in set order.
    pub fn nodes_of_set(&self, s: usize) -> Vec<usize> {
        let mut out = Vec::new();
        for &d in &self.sets[s] {
            let n = self.drives[d].node;
            if !out.contains(&n) {
                out.push(n);
            }
        }
        out
    }

    /// `(set, position)` of drive `d`.
    pub fn position_of(&self, d: usize) -> (usize, usize) {
        for (s, set) in self.sets.iter().enumerate() {
            if let Some(p) = set.iter().position(|&x| x == d) {
                return (s, p);
            }
        }
        (usize::MAX, usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn ellipses_expand_leftmost_slowest() {
        let v = expand_ellipses("http://h{1...2}:900{1...2}/d").unwrap();
        assert_eq!(
            v,
            s(&[
                "http://h1:9001/d",
                "http://h1:9002/d",
                "http://h2:9001/d",
                "http://h2:9002/d"
            ])
        );
        assert_eq!(
            expand_ellipses("/d{01...03}").unwrap(),
            s(&["/d01", "/d02", "/d03"])
        );
        assert_eq!(
            expand_ellipses("/d{a...c}").unwrap(),
            s(&["/da", "/db", "/dc"])
        );
        assert_eq!(expand_ellipses("plain").unwrap(), s(&["plain"]));
    }

    #[test]
    fn bad_ellipses_are_refused() {
        for bad in [
            "/d{1...",
            "/d{1..3}",
            "/d{3...1}",
            "/d}",
            "/d{...3}",
            "/d{1...99999999}",
            "/a{1...100}/b{1...100}",
        ] {
            assert!(expand_ellipses(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn four_nodes_four_drives_sets_of_four_span_all_nodes() {
        // Ellipses combine (as MinIO's do): on one host, every port would get the same 16
        // directories, which is refused.
        let e = Topology::from_args(
            &s(&["http://127.0.0.1:{9001...9004}/srv/node{1...4}/d{1...4}"]),
            Some(4),
        )
        .unwrap_err();
        assert!(e.to_string().contains("distinct drive directories"), "{e}");
        let t =
            Topology::from_args(&s(&["http://node{1...4}:9000/srv/d{1...4}"]), Some(4)).unwrap();
        assert_eq!(t.nodes.len(), 4);
        assert_eq!(t.drives.len(), 16);
        let t = Topology::from_args(
            &s(&[
                "http://127.0.0.1:9001/srv/node1/d{1...4}",
                "http://127.0.0.1:9002/srv/node2/d{1...4}",
                "http://127.0.0.1:9003/srv/node3/d{1...4}",
                "http://127.0.0.1:9004/srv/node4/d{1...4}",
            ]),
            Some(4),
        )
        .unwrap();
        assert_eq!(t.sets.len(), 4);
        for (i, set) in t.sets.iter().enumerate() {
            let nodes: Vec<usize> = set.iter().map(|&d| t.drives[d].node).collect();
            assert_eq!(nodes, vec![0, 1, 2, 3]);
            assert!(set.iter().all(|&d| t.drives[d].index_on_node == i));
        }
        assert_eq!(t.nodes_of_set(2), vec![0, 1, 2, 3]);
        // Default set size: the largest divisor up to 16.
        let t2 = Topology::from_args(&s(&["http://n{1...4}:9000/srv/d{1...4}"]), None).unwrap();
        assert_eq!(t2.sets.len(), 1);
        assert_eq!(t2.set_size(), 16);
    }

    #[test]
    fn layouts_are_checked() {
        // Uneven nodes.
        assert!(Topology::from_args(
            &s(&["http://a:1/d1", "http://a:1/d2", "http://b:1/d1"]),
            None
        )
        .is_err());
        // Set size that does not divide.
        assert!(Topology::from_args(&s(&["http://a:1/d{1...6}"]), Some(4)).is_err());
        // Duplicates, bad URLs.
        assert!(Topology::from_args(&s(&["http://a:1/d", "http://a:1/d"]), None).is_err());
        for bad in [
            "http://a/d",
            "http://a:x/d",
            "http://a:1",
            "ftp://a:1/d",
            "http://a:1/../d",
        ] {
            assert!(Topology::from_args(&s(&[bad, bad]), None).is_err(), "{bad}");
        }
        // 17 drives: no divisor in 2..=16.
        assert!(Topology::from_args(&s(&["http://a:1/d{1...17}"]), None).is_err());
    }

    #[test]
    fn fingerprint_depends_on_layout_only() {
        let a = Topology::from_args(&s(&["http://h{1...4}:1/d{1...2}"]), Some(4)).unwrap();
        let b = Topology::from_args(&s(&["http://H{1...4}:1/d{1...2}"]), Some(4)).unwrap();
        let c = Topology::from_args(&s(&["http://h{1...4}:1/d{1...2}"]), Some(2)).unwrap();
        let d = Topology::from_args(&s(&["http://h{1...4}:1/e{1...2}"]), Some(4)).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_ne!(a.fingerprint(), d.fingerprint());
        // The scheme is how nodes talk, not the layout.
        let e = Topology::from_args(&s(&["https://h{1...4}:1/d{1...2}"]), Some(4)).unwrap();
        assert!(e.tls && !a.tls);
        assert_eq!(a.fingerprint(), e.fingerprint());
        // Pinned: the fingerprint of http:// layouts is the one running clusters have.
        let one = Topology::from_args(&s(&["http://a:1/d{1...2}"]), None).unwrap();
        assert_eq!(one.fingerprint_hex(), PINNED_FINGERPRINT);
    }

    /// `http://a:1/d{1...2}`'s fingerprint before the scheme was left out of it.
    const PINNED_FINGERPRINT: &str = "bf96f4d8b25ac607";

    #[test]
    fn one_scheme_per_deployment() {
        let e = Topology::from_args(&s(&["http://a:1/d1", "https://b:1/d1"]), None).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("mix http:// and https://") && msg.contains("https://b:1/d1"),
            "{msg}"
        );
        let t = Topology::from_args(&s(&["https://a:1/d1", "HTTPS://b:1/d1"]), None);
        assert!(t.is_err(), "the scheme is lower case, as in http://");
        let t = Topology::from_args(&s(&["https://a:1/d1", "https://b:1/d1"]), None).unwrap();
        assert!(t.tls);
        assert_eq!(t.nodes, vec!["a:1", "b:1"]);
    }

    #[test]
    fn nodes_find_themselves() {
        let t = Topology::from_args(
            &s(&[
                "http://127.0.0.1:9001/a{1...2}",
                "http://127.0.0.1:9002/b{1...2}",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(t.node_of_address("127.0.0.1:9002", None), Some(1));
        assert_eq!(t.node_of_address("0.0.0.0:9001", None), Some(0));
        assert_eq!(t.node_of_address(":9001", None), Some(0));
        assert_eq!(t.node_of_address("127.0.0.1:9000", None), None);
        let t = Topology::from_args(&s(&["http://node{1...2}:9000/d{1...2}"]), None).unwrap();
        assert_eq!(t.node_of_address("0.0.0.0:9000", Some("node2")), Some(1));
        assert_eq!(t.node_of_address("0.0.0.0:9000", None), None);
        assert_eq!(t.node_of_address("10.0.0.1:9000", Some("node2")), None);
    }
}
