//! The `Condition` element: operators, qualifiers and how they decide against a [`Context`].
//!
//! Semantics, as AWS documents them:
//! - several operators in a block, and several keys under one operator, must all hold;
//! - several values for one key hold if any matches (for the negated operators —
//!   `StringNotEquals`, `NotIpAddress`, ... — if none matches: a logical AND);
//! - a key the request lacks: positive operators are false, negated ones true, `...IfExists`
//!   true, `ForAnyValue:` false, `ForAllValues:` true; `Null` tests exactly that absence.

use std::net::IpAddr;

use serde_json::Value;

use crate::eval::Context;
use crate::parse::Place;
use crate::pattern::Pattern;
use crate::PolicyError;

/// The comparison an operator makes (its negation and `IfExists` are separate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    StringEquals,
    StringEqualsIgnoreCase,
    StringLike,
    NumericEquals,
    NumericLessThan,
    NumericLessThanEquals,
    NumericGreaterThan,
    NumericGreaterThanEquals,
    DateEquals,
    DateLessThan,
    DateLessThanEquals,
    DateGreaterThan,
    DateGreaterThanEquals,
    Bool,
    BinaryEquals,
    IpAddress,
    ArnEquals,
    ArnLike,
    Null,
}

/// Every operator name the parser accepts (before `IfExists` and the set qualifiers), with its
/// comparison and whether it is the negated form.
pub const OPERATORS: &[(&str, Operator, bool)] = &[
    ("StringEquals", Operator::StringEquals, false),
    ("StringNotEquals", Operator::StringEquals, true),
    (
        "StringEqualsIgnoreCase",
        Operator::StringEqualsIgnoreCase,
        false,
    ),
    (
        "StringNotEqualsIgnoreCase",
        Operator::StringEqualsIgnoreCase,
        true,
    ),
    ("StringLike", Operator::StringLike, false),
    ("StringNotLike", Operator::StringLike, true),
    ("NumericEquals", Operator::NumericEquals, false),
    ("NumericNotEquals", Operator::NumericEquals, true),
    ("NumericLessThan", Operator::NumericLessThan, false),
    (
        "NumericLessThanEquals",
        Operator::NumericLessThanEquals,
        false,
    ),
    ("NumericGreaterThan", Operator::NumericGreaterThan, false),
    (
        "NumericGreaterThanEquals",
        Operator::NumericGreaterThanEquals,
        false,
    ),
    ("DateEquals", Operator::DateEquals, false),
    ("DateNotEquals", Operator::DateEquals, true),
    ("DateLessThan", Operator::DateLessThan, false),
    ("DateLessThanEquals", Operator::DateLessThanEquals, false),
    ("DateGreaterThan", Operator::DateGreaterThan, false),
    (
        "DateGreaterThanEquals",
        Operator::DateGreaterThanEquals,
        false,
    ),
    ("Bool", Operator::Bool, false),
    ("BinaryEquals", Operator::BinaryEquals, false),
    ("IpAddress", Operator::IpAddress, false),
    ("NotIpAddress", Operator::IpAddress, true),
    ("ArnEquals", Operator::ArnEquals, false),
    ("ArnNotEquals", Operator::ArnEquals, true),
    ("ArnLike", Operator::ArnLike, false),
    ("ArnNotLike", Operator::ArnLike, true),
    ("Null", Operator::Null, false),
];

/// `ForAllValues:` / `ForAnyValue:` in front of an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qualifier {
    None,
    ForAllValues,
    ForAnyValue,
}

/// A value of the policy, parsed for its operator at parse time.
#[derive(Debug, Clone, PartialEq)]
enum Expected {
    Text(Pattern),
    Number(f64),
    /// Nanoseconds since the epoch.
    Date(i128),
    Bool(bool),
    Net(IpAddr, u8),
    /// An ARN's six parts, each a pattern.
    Arn(Vec<Pattern>),
}

impl Eq for Expected {}

/// One `operator: {key: values}` pair of a `Condition` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub operator: Operator,
    pub negated: bool,
    pub if_exists: bool,
    pub qualifier: Qualifier,
    /// The condition key as written (compared case-insensitively).
    pub key: String,
    /// `key` in ASCII lower case, as the context stores its keys.
    key_lowercase: String,
    values: Vec<Expected>,
}

/// The statement's `Condition` element.
pub(crate) fn parse_block(
    at: &Place<'_>,
    value: &Value,
    variables: bool,
) -> Result<Vec<Condition>, PolicyError> {
    let block = value
        .as_object()
        .ok_or_else(|| at.err("Condition", "must be an object of operators"))?;
    let mut out = Vec::new();
    for (name, keys) in block {
        let field = format!("Condition.{name}");
        let (qualifier, rest) = if let Some(r) = name.strip_prefix("ForAllValues:") {
            (Qualifier::ForAllValues, r)
        } else if let Some(r) = name.strip_prefix("ForAnyValue:") {
            (Qualifier::ForAnyValue, r)
        } else {
            (Qualifier::None, name.as_str())
        };
        let (if_exists, base) = match rest.strip_suffix("IfExists") {
            Some(b) => (true, b),
            None => (false, rest),
        };
        let &(_, operator, negated) = OPERATORS
            .iter()
            .find(|(n, _, _)| *n == base)
            .ok_or_else(|| at.err(&field, "unknown condition operator"))?;
        if operator == Operator::Null && (if_exists || qualifier != Qualifier::None) {
            return Err(at.err(&field, "Null takes neither IfExists nor a set qualifier"));
        }
        let keys = keys
            .as_object()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| at.err(&field, "must be an object of condition keys and values"))?;
        for (key, values) in keys {
            let field = format!("{field}.{key}");
            if key.is_empty() {
                return Err(at.err(&field, "empty condition key"));
            }
            let raw: Vec<String> = match values {
                Value::Array(a) if a.is_empty() => {
                    return Err(at.err(&field, "must not be an empty list"))
                }
                Value::Array(a) => a
                    .iter()
                    .map(|v| scalar(at, &field, v))
                    .collect::<Result<_, _>>()?,
                v => vec![scalar(at, &field, v)?],
            };
            let values = raw
                .iter()
                .map(|v| expected(operator, v, variables).map_err(|e| at.err(&field, e)))
                .collect::<Result<_, _>>()?;
            out.push(Condition {
                operator,
                negated,
                if_exists,
                qualifier,
                key: key.clone(),
                key_lowercase: key.to_ascii_lowercase(),
                values,
            });
        }
    }
    Ok(out)
}

fn scalar(at: &Place<'_>, field: &str, v: &Value) -> Result<String, PolicyError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(at.err(field, format!("{other} is not a string, number or boolean"))),
    }
}

fn expected(op: Operator, v: &str, variables: bool) -> Result<Expected, String> {
    use Operator as O;
    Ok(match op {
        O::StringEquals | O::StringEqualsIgnoreCase | O::BinaryEquals => {
            Expected::Text(Pattern::compile(v, variables, false)?)
        }
        O::StringLike => Expected::Text(Pattern::compile(v, variables, true)?),
        O::NumericEquals
        | O::NumericLessThan
        | O::NumericLessThanEquals
        | O::NumericGreaterThan
        | O::NumericGreaterThanEquals => {
            Expected::Number(number(v).ok_or_else(|| format!("{v:?} is not a number"))?)
        }
        O::DateEquals
        | O::DateLessThan
        | O::DateLessThanEquals
        | O::DateGreaterThan
        | O::DateGreaterThanEquals => Expected::Date(date(v).ok_or_else(|| {
            format!("{v:?} is not a date (ISO 8601 such as 2026-01-31T12:00:00Z, or epoch seconds)")
        })?),
        O::Bool | O::Null => Expected::Bool(match v.to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => return Err(format!("{v:?} is neither true nor false")),
        }),
        O::IpAddress => {
            let (ip, len) = cidr(v).ok_or_else(|| {
                format!("{v:?} is not an IP address or CIDR block (192.0.2.0/24, 2001:db8::/32)")
            })?;
            Expected::Net(ip, len)
        }
        O::ArnEquals | O::ArnLike => {
            if v == "*" {
                Expected::Arn(vec![Pattern::compile("*", false, true)?])
            } else {
                let parts: Vec<&str> = v.splitn(6, ':').collect();
                if parts.len() != 6 || parts[0] != "arn" {
                    return Err(format!("{v:?} is not an ARN"));
                }
                Expected::Arn(
                    parts
                        .iter()
                        .map(|p| Pattern::compile(p, variables, true))
                        .collect::<Result<_, _>>()?,
                )
            }
        }
    })
}

fn number(v: &str) -> Option<f64> {
    v.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

/// ISO 8601 / RFC 3339 (with a zone), a bare date (`2026-01-31`), or epoch seconds.
pub(crate) fn date(v: &str) -> Option<i128> {
    use time::format_description::well_known::Rfc3339;
    if let Ok(t) = time::OffsetDateTime::parse(v, &Rfc3339) {
        return Some(t.unix_timestamp_nanos());
    }
    if let Ok(d) = time::Date::parse(v, time::macros::format_description!("[year]-[month]-[day]")) {
        return Some(d.midnight().assume_utc().unix_timestamp_nanos());
    }
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<i64>().ok().map(|s| i128::from(s) * 1_000_000_000);
    }
    None
}

fn cidr(v: &str) -> Option<(IpAddr, u8)> {
    let (ip, len) = match v.split_once('/') {
        Some((ip, len)) => (ip.parse::<IpAddr>().ok()?, Some(len.parse::<u8>().ok()?)),
        None => (v.parse::<IpAddr>().ok()?, None),
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(max);
    (len <= max).then_some((ip, len))
}

fn in_net(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    let ip = match (ip, net) {
        // An IPv4 client seen through an IPv6 socket.
        (IpAddr::V6(v6), IpAddr::V4(_)) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => return false,
        },
        _ => ip,
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len))
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len))
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// One value of the request, parsed for the operator that compares it (once per condition).
struct Actual<'a> {
    text: &'a str,
    /// `None`: the operator compares text, or the value does not parse for it.
    parsed: Option<Parsed>,
}

/// A request value as the operator's kind reads it.
#[derive(Clone, Copy)]
enum Parsed {
    Number(f64),
    Date(i128),
    Bool(bool),
    Ip(IpAddr),
}

impl<'a> Actual<'a> {
    fn parse(operator: Operator, text: &'a str) -> Actual<'a> {
        use Operator as O;
        let parsed = match operator {
            O::NumericEquals
            | O::NumericLessThan
            | O::NumericLessThanEquals
            | O::NumericGreaterThan
            | O::NumericGreaterThanEquals => number(text).map(Parsed::Number),
            O::DateEquals
            | O::DateLessThan
            | O::DateLessThanEquals
            | O::DateGreaterThan
            | O::DateGreaterThanEquals => date(text).map(Parsed::Date),
            O::Bool if text.eq_ignore_ascii_case("true") => Some(Parsed::Bool(true)),
            O::Bool if text.eq_ignore_ascii_case("false") => Some(Parsed::Bool(false)),
            O::IpAddress => text.parse::<IpAddr>().ok().map(Parsed::Ip),
            _ => None,
        };
        Actual { text, parsed }
    }

    fn number(&self) -> Option<f64> {
        match self.parsed {
            Some(Parsed::Number(n)) => Some(n),
            _ => None,
        }
    }

    fn date(&self) -> Option<i128> {
        match self.parsed {
            Some(Parsed::Date(d)) => Some(d),
            _ => None,
        }
    }
}

impl Condition {
    /// Whether the condition holds for a request with this context.
    pub fn holds(&self, ctx: &Context) -> bool {
        let actual = ctx
            .get_lowercase(&self.key_lowercase)
            .filter(|v| !v.is_empty());
        if self.operator == Operator::Null {
            // "true": the key must be absent; "false": present. Several values: any.
            return self
                .values
                .iter()
                .any(|e| matches!(e, Expected::Bool(absent) if *absent == actual.is_none()));
        }
        let Some(actual) = actual else {
            return match self.qualifier {
                Qualifier::ForAllValues => true,
                Qualifier::ForAnyValue => false,
                Qualifier::None => self.if_exists || self.negated,
            };
        };
        // Per value of the request: does it satisfy the operator (negation included)? The value
        // is parsed for the operator once, not once per policy value.
        let one = |v: &str| {
            let actual = Actual::parse(self.operator, v);
            self.values.iter().any(|e| self.compare(e, &actual, ctx)) != self.negated
        };
        match self.qualifier {
            Qualifier::ForAllValues => actual.iter().all(|v| one(v)),
            Qualifier::ForAnyValue => actual.iter().any(|v| one(v)),
            // A single-valued operator: positive if any request value matches any policy
            // value; negated if none does.
            Qualifier::None if self.negated => actual.iter().all(|v| one(v)),
            Qualifier::None => actual.iter().any(|v| one(v)),
        }
    }

    /// The positive comparison of one request value with one policy value.
    fn compare(&self, expected: &Expected, parsed: &Actual<'_>, ctx: &Context) -> bool {
        use Operator as O;
        let actual = parsed.text;
        match (self.operator, expected) {
            (O::StringEquals | O::BinaryEquals, Expected::Text(p)) => {
                p.resolve_literal(ctx).is_some_and(|e| e == actual)
            }
            (O::StringEqualsIgnoreCase, Expected::Text(p)) => {
                p.resolve_literal(ctx).is_some_and(|e| {
                    e.chars()
                        .flat_map(char::to_lowercase)
                        .eq(actual.chars().flat_map(char::to_lowercase))
                })
            }
            (O::StringLike, Expected::Text(p)) => p.matches(actual, ctx, false),
            (op, Expected::Number(e)) => parsed.number().is_some_and(|a| match op {
                O::NumericEquals => a == *e,
                O::NumericLessThan => a < *e,
                O::NumericLessThanEquals => a <= *e,
                O::NumericGreaterThan => a > *e,
                O::NumericGreaterThanEquals => a >= *e,
                _ => false,
            }),
            (op, Expected::Date(e)) => parsed.date().is_some_and(|a| match op {
                O::DateEquals => a == *e,
                O::DateLessThan => a < *e,
                O::DateLessThanEquals => a <= *e,
                O::DateGreaterThan => a > *e,
                O::DateGreaterThanEquals => a >= *e,
                _ => false,
            }),
            (O::Bool, Expected::Bool(e)) => {
                matches!(parsed.parsed, Some(Parsed::Bool(b)) if b == *e)
            }
            (O::IpAddress, Expected::Net(net, len)) => {
                matches!(parsed.parsed, Some(Parsed::Ip(ip)) if in_net(ip, *net, *len))
            }
            (O::ArnEquals | O::ArnLike, Expected::Arn(parts)) => {
                if let [only] = parts.as_slice() {
                    return only.matches(actual, ctx, false);
                }
                let got: Vec<&str> = actual.splitn(6, ':').collect();
                got.len() == 6
                    && parts
                        .iter()
                        .zip(&got)
                        .all(|(p, a)| p.matches(a, ctx, false))
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;

    /// The conditions of a one-statement identity policy with this `Condition` element.
    fn conds(block: &str) -> Vec<Condition> {
        let json = format!(
            r#"{{"Version":"2012-10-17","Statement":{{"Effect":"Allow","Action":"*","Resource":"*","Condition":{block}}}}}"#
        );
        Policy::parse_identity(&json)
            .unwrap_or_else(|e| panic!("{block}: {e}"))
            .statements
            .remove(0)
            .conditions
    }

    fn holds(block: &str, ctx: &Context) -> bool {
        conds(block).iter().all(|c| c.holds(ctx))
    }

    fn ctx(pairs: &[(&str, &str)]) -> Context {
        let mut c = Context::default();
        for (k, v) in pairs {
            c.insert(k, *v);
        }
        c
    }

    #[test]
    fn strings_and_missing_keys() {
        let c = ctx(&[("s3:prefix", "home/alice/"), ("aws:username", "alice")]);
        assert!(holds(
            r#"{"StringEquals":{"s3:prefix":["x","home/alice/"]}}"#,
            &c
        ));
        assert!(holds(r#"{"StringEquals":{"S3:Prefix":"home/alice/"}}"#, &c));
        assert!(!holds(r#"{"StringEquals":{"s3:prefix":"home/*"}}"#, &c));
        assert!(holds(r#"{"StringLike":{"s3:prefix":"home/*"}}"#, &c));
        assert!(holds(
            r#"{"StringLike":{"s3:prefix":"home/${aws:username}/*"}}"#,
            &c
        ));
        assert!(holds(
            r#"{"StringEquals":{"s3:prefix":"home/${aws:username}/"}}"#,
            &c
        ));
        assert!(!holds(
            r#"{"StringNotEquals":{"s3:prefix":["a","home/alice/"]}}"#,
            &c
        ));
        assert!(holds(r#"{"StringNotEquals":{"s3:prefix":["a","b"]}}"#, &c));
        assert!(holds(
            r#"{"StringEqualsIgnoreCase":{"s3:prefix":"HOME/Alice/"}}"#,
            &c
        ));
        assert!(!holds(r#"{"StringNotLike":{"s3:prefix":"home/*"}}"#, &c));
        // Missing key: positive false, negated true, IfExists true.
        assert!(!holds(r#"{"StringEquals":{"s3:delimiter":"/"}}"#, &c));
        assert!(holds(r#"{"StringNotEquals":{"s3:delimiter":"/"}}"#, &c));
        assert!(holds(
            r#"{"StringEqualsIfExists":{"s3:delimiter":"/"}}"#,
            &c
        ));
        assert!(holds(
            r#"{"Null":{"s3:delimiter":"true","s3:prefix":"false"}}"#,
            &c
        ));
        assert!(!holds(r#"{"Null":{"s3:prefix":"true"}}"#, &c));
        // Every operator and key must hold.
        assert!(!holds(
            r#"{"StringLike":{"s3:prefix":"home/*"},"StringEquals":{"aws:username":"bob"}}"#,
            &c
        ));
    }

    #[test]
    fn set_qualifiers() {
        let mut c = Context::default();
        c.insert("aws:TagKeys", "a");
        c.insert("aws:TagKeys", "b");
        assert!(holds(
            r#"{"ForAllValues:StringEquals":{"aws:TagKeys":["a","b","c"]}}"#,
            &c
        ));
        assert!(!holds(
            r#"{"ForAllValues:StringEquals":{"aws:TagKeys":["a"]}}"#,
            &c
        ));
        assert!(holds(
            r#"{"ForAnyValue:StringEquals":{"aws:TagKeys":["a"]}}"#,
            &c
        ));
        assert!(!holds(
            r#"{"ForAnyValue:StringEquals":{"aws:TagKeys":["z"]}}"#,
            &c
        ));
        let empty = Context::default();
        assert!(holds(
            r#"{"ForAllValues:StringEquals":{"aws:TagKeys":"a"}}"#,
            &empty
        ));
        assert!(!holds(
            r#"{"ForAnyValue:StringEquals":{"aws:TagKeys":"a"}}"#,
            &empty
        ));
    }

    #[test]
    fn numbers_dates_bools_ips_arns() {
        let c = ctx(&[
            ("s3:max-keys", "10"),
            ("aws:CurrentTime", "2026-12-02T08:00:00Z"),
            ("aws:SecureTransport", "false"),
            ("aws:SourceIp", "192.0.2.77"),
            ("aws:PrincipalArn", "arn:aws:iam::123:user/alice"),
        ]);
        assert!(holds(
            r#"{"NumericLessThanEquals":{"s3:max-keys":"10"}}"#,
            &c
        ));
        assert!(holds(r#"{"NumericLessThan":{"s3:max-keys":11}}"#, &c));
        assert!(!holds(r#"{"NumericGreaterThan":{"s3:max-keys":"10"}}"#, &c));
        assert!(holds(r#"{"NumericNotEquals":{"s3:max-keys":"9"}}"#, &c));
        assert!(holds(
            r#"{"DateGreaterThan":{"aws:CurrentTime":"2026-01-01T00:00:00Z"}}"#,
            &c
        ));
        assert!(holds(
            r#"{"DateLessThan":{"aws:CurrentTime":"2027-01-01"}}"#,
            &c
        ));
        assert!(!holds(
            r#"{"DateLessThan":{"aws:CurrentTime":"1700000000"}}"#,
            &c
        ));
        assert!(holds(r#"{"Bool":{"aws:SecureTransport":"false"}}"#, &c));
        assert!(!holds(r#"{"Bool":{"aws:SecureTransport":true}}"#, &c));
        assert!(holds(
            r#"{"IpAddress":{"aws:SourceIp":"192.0.2.0/24"}}"#,
            &c
        ));
        assert!(!holds(
            r#"{"IpAddress":{"aws:SourceIp":["10.0.0.0/8","2001:db8::/32"]}}"#,
            &c
        ));
        assert!(holds(
            r#"{"NotIpAddress":{"aws:SourceIp":"10.0.0.0/8"}}"#,
            &c
        ));
        assert!(holds(r#"{"IpAddress":{"aws:SourceIp":"192.0.2.77"}}"#, &c));
        let v6 = ctx(&[("aws:SourceIp", "::ffff:192.0.2.5")]);
        assert!(holds(
            r#"{"IpAddress":{"aws:SourceIp":"192.0.2.0/24"}}"#,
            &v6
        ));
        assert!(holds(
            r#"{"ArnLike":{"aws:PrincipalArn":"arn:aws:iam::*:user/a*"}}"#,
            &c
        ));
        assert!(!holds(
            r#"{"ArnEquals":{"aws:PrincipalArn":"arn:aws:iam::124:user/alice"}}"#,
            &c
        ));
        assert!(holds(
            r#"{"ArnNotLike":{"aws:PrincipalArn":"arn:aws:iam::*:role/*"}}"#,
            &c
        ));
    }

    #[test]
    fn bad_values_are_malformed() {
        for (block, want) in [
            (
                r#"{"StringEquals":"x"}"#,
                "Condition.StringEquals: must be an object",
            ),
            (
                r#"{"StringEqual":{"a":"b"}}"#,
                "Condition.StringEqual: unknown condition operator",
            ),
            (
                r#"{"NumericLessThan":{"s3:max-keys":"ten"}}"#,
                "Condition.NumericLessThan.s3:max-keys: \"ten\" is not a number",
            ),
            (
                r#"{"DateLessThan":{"aws:CurrentTime":"tomorrow"}}"#,
                "is not a date",
            ),
            (
                r#"{"Bool":{"aws:SecureTransport":"yes"}}"#,
                "neither true nor false",
            ),
            (
                r#"{"IpAddress":{"aws:SourceIp":"10.0.0.0/33"}}"#,
                "not an IP address",
            ),
            (
                r#"{"ArnLike":{"aws:PrincipalArn":"user/alice"}}"#,
                "not an ARN",
            ),
            (r#"{"NullIfExists":{"a":"true"}}"#, "Null takes neither"),
            (r#"{"StringEquals":{"a":[]}}"#, "empty list"),
            (
                r#"{"StringEquals":{"a":{"b":1}}}"#,
                "not a string, number or boolean",
            ),
        ] {
            let json = format!(
                r#"{{"Version":"2012-10-17","Statement":{{"Sid":"S","Effect":"Allow","Action":"*","Resource":"*","Condition":{block}}}}}"#
            );
            let e = Policy::parse_identity(&json).unwrap_err().to_string();
            assert!(e.starts_with("Statement 1 (Sid \"S\"): Condition."), "{e}");
            assert!(e.contains(want), "{block}: {e}");
        }
    }
}
