//! Property tests: the evaluator against a small, obviously-correct reference evaluator over
//! random policies and requests; evaluation invariants; and no input makes the parser panic.

use proptest::prelude::*;
use quarry_policy::{evaluate, Context, Decision, Policy, Principal, Request};

// ---- the model: policies as plain data, rendered to JSON for the real parser ----

#[derive(Debug, Clone)]
struct Cond {
    op: &'static str,
    key: &'static str,
    values: Vec<&'static str>,
}

#[derive(Debug, Clone)]
struct St {
    deny: bool,
    not_action: bool,
    actions: Vec<&'static str>,
    not_resource: bool,
    resources: Vec<&'static str>,
    /// Resource policies: `None` = "*", else the listed user names; `not` = NotPrincipal.
    principal: Option<Vec<&'static str>>,
    not_principal: bool,
    conds: Vec<Cond>,
}

const ACTIONS: &[&str] = &[
    "s3:GetObject",
    "s3:PutObject",
    "s3:ListBucket",
    "s3:Get*",
    "s3:*",
    "*",
    "s3:?etObject",
    "iam:CreateUser",
    "s3:*Object",
];
const REQ_ACTIONS: &[&str] = &[
    "s3:GetObject",
    "s3:PutObject",
    "s3:ListBucket",
    "iam:CreateUser",
    "s3:getobject",
];
const RESOURCES: &[&str] = &[
    "*",
    "arn:aws:s3:::b/*",
    "arn:aws:s3:::b",
    "arn:aws:s3:::b?/*",
    "arn:aws:s3:::*/x*",
    "arn:aws:s3:::b/${aws:username}/*",
    "arn:aws:s3:::b/${*}",
];
const REQ_RESOURCES: &[&str] = &[
    "arn:aws:s3:::b",
    "arn:aws:s3:::b/x",
    "arn:aws:s3:::b/alice/x",
    "arn:aws:s3:::bc/xy",
    "arn:aws:s3:::b/*",
    "arn:aws:s3:::c/q",
    "*",
];
const OPS: &[&str] = &[
    "StringEquals",
    "StringNotEquals",
    "StringLike",
    "StringNotLike",
    "StringEqualsIfExists",
    "NumericLessThan",
    "Null",
];
const USERS: &[&str] = &["alice", "bob"];

fn cond() -> impl Strategy<Value = Cond> {
    (
        0..OPS.len(),
        prop::bool::ANY,
        prop::collection::vec(0..4usize, 1..3),
    )
        .prop_map(|(o, k, vs)| {
            let op = OPS[o];
            let key = if k { "s3:prefix" } else { "s3:max-keys" };
            let pool: &[&str] = match op {
                "NumericLessThan" => &["5", "10", "100", "0"],
                "Null" => &["true", "false", "true", "false"],
                _ => &["a/", "a/*", "10", "${aws:username}/"],
            };
            Cond {
                op,
                key,
                values: vs.into_iter().map(|i| pool[i]).collect(),
            }
        })
}

fn statement(resource_policy: bool) -> impl Strategy<Value = St> {
    (
        prop::bool::ANY,
        prop::bool::weighted(0.2),
        prop::collection::vec(0..ACTIONS.len(), 1..3),
        prop::bool::weighted(0.2),
        prop::collection::vec(0..RESOURCES.len(), 1..3),
        prop::option::of(prop::collection::vec(0..USERS.len(), 1..3)),
        prop::bool::weighted(0.2),
        prop::collection::vec(cond(), 0..3),
    )
        .prop_map(move |(deny, na, a, nr, r, p, np, conds)| St {
            deny,
            not_action: na,
            actions: a.into_iter().map(|i| ACTIONS[i]).collect(),
            not_resource: nr,
            resources: r.into_iter().map(|i| RESOURCES[i]).collect(),
            principal: p.map(|v| v.into_iter().map(|i| USERS[i]).collect()),
            not_principal: resource_policy && np,
            conds,
        })
}

fn render(sts: &[St], resource_policy: bool) -> String {
    let mut out = Vec::new();
    for st in sts {
        let mut m = serde_json::Map::new();
        m.insert(
            "Effect".into(),
            (if st.deny { "Deny" } else { "Allow" }).into(),
        );
        m.insert(
            (if st.not_action { "NotAction" } else { "Action" }).into(),
            st.actions.clone().into(),
        );
        m.insert(
            (if st.not_resource {
                "NotResource"
            } else {
                "Resource"
            })
            .into(),
            st.resources.clone().into(),
        );
        if resource_policy {
            let p: serde_json::Value = match &st.principal {
                None => "*".into(),
                Some(users) => serde_json::json!({
                    "AWS": users.iter().map(|u| format!("arn:aws:iam::1:user/{u}")).collect::<Vec<_>>()
                }),
            };
            m.insert(
                (if st.not_principal {
                    "NotPrincipal"
                } else {
                    "Principal"
                })
                .into(),
                p,
            );
        }
        if !st.conds.is_empty() {
            let mut block = serde_json::Map::new();
            for c in &st.conds {
                let entry = block
                    .entry(c.op.to_owned())
                    .or_insert_with(|| serde_json::json!({}));
                // One key per operator in the model: a second one of the same key replaces it.
                entry[c.key] = c.values.clone().into();
            }
            m.insert("Condition".into(), block.into());
        }
        out.push(serde_json::Value::Object(m));
    }
    serde_json::json!({"Version": "2012-10-17", "Statement": out}).to_string()
}

// ---- the reference evaluator ----

/// Glob by recursion over characters: slow, plain.
fn glob(p: &[char], t: &[char], ci: bool) -> bool {
    match p.split_first() {
        None => t.is_empty(),
        Some(('*', rest)) => (0..=t.len()).any(|i| glob(rest, &t[i..], ci)),
        Some(('?', rest)) => !t.is_empty() && glob(rest, &t[1..], ci),
        Some((c, rest)) => t.first().is_some_and(|x| {
            (if ci {
                x.eq_ignore_ascii_case(c)
            } else {
                x == c
            }) && glob(rest, &t[1..], ci)
        }),
    }
}

/// `${aws:username}` replaced (None when there is no user name); `${*}` as a literal star is
/// modelled by matching it only against a literal `*` (see `lit_star`).
fn subst(s: &str, username: Option<&str>) -> Option<String> {
    if s.contains("${aws:username}") {
        Some(s.replace("${aws:username}", username?))
    } else {
        Some(s.to_owned())
    }
}

fn pattern_matches(p: &str, text: &str, username: Option<&str>, ci: bool) -> bool {
    if let Some(prefix) = p.strip_suffix("${*}") {
        // Only in RESOURCES as "arn:aws:s3:::b/${*}": the literal text "arn:aws:s3:::b/*".
        return text == format!("{prefix}*");
    }
    let Some(p) = subst(p, username) else {
        return false;
    };
    let p: Vec<char> = p.chars().collect();
    let t: Vec<char> = text.chars().collect();
    glob(&p, &t, ci)
}

struct Req<'a> {
    action: &'a str,
    resource: &'a str,
    user: Option<&'a str>,
    prefix: Option<&'a str>,
    max_keys: Option<&'a str>,
}

fn cond_holds(c: &Cond, r: &Req<'_>) -> bool {
    let actual = if c.key == "s3:prefix" {
        r.prefix
    } else {
        r.max_keys
    };
    let positive = |a: &str| {
        c.values.iter().any(|v| match c.op {
            "StringEquals" | "StringNotEquals" | "StringEqualsIfExists" => {
                subst(v, r.user).is_some_and(|v| v == a)
            }
            "StringLike" | "StringNotLike" => pattern_matches(v, a, r.user, false),
            "NumericLessThan" => match (a.parse::<f64>(), v.parse::<f64>()) {
                (Ok(a), Ok(v)) => a < v,
                _ => false,
            },
            _ => unreachable!(),
        })
    };
    match (c.op, actual) {
        ("Null", a) => c.values.iter().any(|v| (*v == "true") == a.is_none()),
        ("StringNotEquals" | "StringNotLike", None) => true,
        ("StringEqualsIfExists", None) => true,
        (_, None) => false,
        ("StringNotEquals" | "StringNotLike", Some(a)) => !positive(a),
        (_, Some(a)) => positive(a),
    }
}

fn reference(identity: &[Vec<St>], resource: &[Vec<St>], r: &Req<'_>) -> Decision {
    let applies = |st: &St, check_principal: bool| {
        if check_principal {
            let listed = match (&st.principal, r.user) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(users), Some(u)) => users.contains(&u),
            };
            if listed == st.not_principal {
                return false;
            }
        }
        let a = st
            .actions
            .iter()
            .any(|p| pattern_matches(p, r.action, r.user, true))
            != st.not_action;
        let res = st
            .resources
            .iter()
            .any(|p| pattern_matches(p, r.resource, r.user, false))
            != st.not_resource;
        // The model's one-key-per-operator rule: the last condition of an operator and key wins.
        let mut effective: Vec<&Cond> = Vec::new();
        for c in &st.conds {
            effective.retain(|e| !(e.op == c.op && e.key == c.key));
            effective.push(c);
        }
        a && res && effective.iter().all(|c| cond_holds(c, r))
    };
    let all = identity
        .iter()
        .flatten()
        .map(|s| (s, false))
        .chain(resource.iter().flatten().map(|s| (s, true)));
    let matched: Vec<&St> = all
        .filter(|(s, cp)| applies(s, *cp))
        .map(|(s, _)| s)
        .collect();
    if matched.iter().any(|s| s.deny) {
        Decision::ExplicitDeny
    } else if matched.is_empty() {
        Decision::ImplicitDeny
    } else {
        Decision::Allow
    }
}

fn req_strategy(
) -> impl Strategy<Value = (usize, usize, Option<usize>, Option<usize>, Option<usize>)> {
    (
        0..REQ_ACTIONS.len(),
        0..REQ_RESOURCES.len(),
        prop::option::of(0..USERS.len()),
        prop::option::of(0..4usize),
        prop::option::of(0..4usize),
    )
}

const PREFIXES: &[&str] = &["a/", "alice/", "b/", ""];
const MAX_KEYS: &[&str] = &["1", "10", "1000", "x"];

fn run(
    identity: &[Vec<St>],
    resource: &[Vec<St>],
    (a, r, u, p, m): (usize, usize, Option<usize>, Option<usize>, Option<usize>),
) -> (Decision, Decision) {
    let user = u.map(|u| USERS[u]);
    let req = Req {
        action: REQ_ACTIONS[a],
        resource: REQ_RESOURCES[r],
        user,
        prefix: p.map(|p| PREFIXES[p]),
        max_keys: m.map(|m| MAX_KEYS[m]),
    };
    let mut ctx = Context::default();
    if let Some(u) = user {
        ctx.set("aws:username", u);
    }
    if let Some(p) = req.prefix {
        ctx.set("s3:prefix", p);
    }
    if let Some(m) = req.max_keys {
        ctx.set("s3:max-keys", m);
    }
    let principal = Principal {
        anonymous: user.is_none(),
        ids: user
            .map(|u| vec![format!("arn:aws:iam::1:user/{u}")])
            .unwrap_or_default(),
    };
    let ids: Vec<Policy> = identity
        .iter()
        .map(|p| Policy::parse_identity(&render(p, false)).unwrap())
        .collect();
    let res: Vec<Policy> = resource
        .iter()
        .map(|p| Policy::parse_resource(&render(p, true)).unwrap())
        .collect();
    let got = evaluate(
        &ids.iter().collect::<Vec<_>>(),
        &res.iter().collect::<Vec<_>>(),
        &Request {
            action: req.action,
            resource: req.resource,
            principal: &principal,
            context: &ctx,
        },
    );
    (got, reference(identity, resource, &req))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn evaluator_agrees_with_reference(
        identity in prop::collection::vec(prop::collection::vec(statement(false), 1..4), 0..3),
        resource in prop::collection::vec(prop::collection::vec(statement(true), 1..4), 0..2),
        req in req_strategy(),
    ) {
        let (got, want) = run(&identity, &resource, req);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn a_matching_deny_always_wins(
        identity in prop::collection::vec(prop::collection::vec(statement(false), 1..4), 0..3),
        req in req_strategy(),
    ) {
        let mut with_deny = identity.clone();
        with_deny.push(vec![St {
            deny: true, not_action: false, actions: vec!["*"], not_resource: false,
            resources: vec!["*"], principal: None, not_principal: false, conds: vec![],
        }]);
        let (got, _) = run(&with_deny, &[], req);
        prop_assert_eq!(got, Decision::ExplicitDeny);
    }

    #[test]
    fn order_of_policies_and_statements_does_not_matter(
        identity in prop::collection::vec(prop::collection::vec(statement(false), 1..4), 1..3),
        req in req_strategy(),
    ) {
        let mut reversed: Vec<Vec<St>> = identity.iter().rev().cloned().collect();
        for p in &mut reversed { p.reverse(); }
        prop_assert_eq!(run(&identity, &[], req).0, run(&reversed, &[], req).0);
    }

    /// The proptest form of the fuzz target: arbitrary text never panics the parser.
    #[test]
    fn any_text_parses_or_fails_cleanly(s in "\\PC{0,200}") {
        let _ = Policy::parse_identity(&s);
        let _ = Policy::parse_resource(&s);
    }

    /// Structured but wrong documents: random JSON in every field position.
    #[test]
    fn any_json_parses_or_fails_cleanly(v in json_value(3)) {
        let doc = serde_json::json!({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": v.clone(), "Resource": "*"},
            {"Effect": "Allow", "Action": "*", "Resource": v.clone(), "Principal": v.clone()},
            {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": v.clone()},
            {"Effect": "Allow", "Action": "*", "Resource": "*", "Condition": {"StringLike": v.clone()}},
        ]});
        let _ = Policy::from_value(&doc, quarry_policy::PolicyKind::Identity);
        let _ = Policy::from_value(&doc, quarry_policy::PolicyKind::Resource);
        let _ = Policy::from_value(&v, quarry_policy::PolicyKind::Resource);
    }

    #[test]
    fn glob_agrees_with_reference(p in "[ab*?]{0,8}", t in "[ab]{0,10}") {
        let pc: Vec<char> = p.chars().collect();
        let tc: Vec<char> = t.chars().collect();
        prop_assert_eq!(quarry_policy::glob_match(&p, &t), glob(&pc, &tc, false));
    }
}

fn json_value(depth: u32) -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-zA-Z0-9:*?${}/ .-]{0,20}".prop_map(serde_json::Value::from),
        prop::sample::select(vec![
            "s3:GetObject",
            "*",
            "arn:aws:s3:::b/*",
            "StringLike",
            "AWS",
            "${aws:username}",
            "2012-10-17",
            "10.0.0.0/8",
            "arn:aws:iam::1:user/a",
        ])
        .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(depth, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "AWS",
                    "StringLike",
                    "NumericLessThan",
                    "s3:prefix",
                    "ForAllValues:StringEquals",
                    "Null",
                    "IpAddress",
                    "aws:SourceIp",
                    "DateLessThan",
                    "x",
                ]),
                inner,
                0..3
            )
            .prop_map(|m| serde_json::Value::Object(
                m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
            )),
        ]
    })
}
