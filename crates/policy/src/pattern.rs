//! Wildcard patterns (`*` any run of characters, `?` one character) with policy variables.

use crate::eval::Context;

/// One piece of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// Literal text (wildcard characters that came from `${*}` / `${?}` are literal here).
    Text(String),
    /// `*`.
    Star,
    /// `?`.
    One,
    /// `${key}` or `${key, 'default'}`: the context key's (first) value, matched literally.
    /// The key is kept in ASCII lower case, as the context stores its keys.
    Var {
        key: String,
        default: Option<String>,
    },
}

/// A resource, action or condition value as written in a policy, compiled once at parse time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    parts: Vec<Part>,
    has_vars: bool,
}

/// A piece of a pattern resolved for one request.
#[derive(Debug, Clone, Copy)]
enum Atom<'a> {
    Lit(&'a str),
    Star,
    One,
}

impl Pattern {
    /// Compiles `source`. With `variables`, `${...}` is a policy variable (documents of version
    /// `2012-10-17`); without, it is literal text. With `wildcards` false, `*` and `?` are literal
    /// too (`StringEquals`). Errors describe a malformed variable.
    pub fn compile(source: &str, variables: bool, wildcards: bool) -> Result<Pattern, String> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut has_vars = false;
        let mut rest = source;
        while let Some(c) = rest.chars().next() {
            if variables && rest.starts_with("${") {
                let end = rest.find('}').ok_or_else(|| {
                    format!("the policy variable in {source:?} has no closing '}}'")
                })?;
                let inner = rest[2..end].trim();
                rest = &rest[end + 1..];
                match inner {
                    "*" | "?" | "$" => text.push_str(inner),
                    _ => {
                        let (key, default) = match inner.split_once(',') {
                            None => (inner, None),
                            Some((k, d)) => {
                                let d = d.trim();
                                let d = d
                                    .strip_prefix('\'')
                                    .and_then(|d| d.strip_suffix('\''))
                                    .ok_or_else(|| {
                                        format!("the default of the policy variable ${{{inner}}} must be quoted with '")
                                    })?;
                                (k.trim(), Some(d.to_owned()))
                            }
                        };
                        if key.is_empty()
                            || !key
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || ":/-_.".contains(c))
                        {
                            return Err(format!("{inner:?} is not a policy variable"));
                        }
                        flush(&mut text, &mut parts);
                        parts.push(Part::Var {
                            key: key.to_ascii_lowercase(),
                            default,
                        });
                        has_vars = true;
                    }
                }
                continue;
            }
            rest = &rest[c.len_utf8()..];
            match c {
                '*' if wildcards => {
                    flush(&mut text, &mut parts);
                    // `**` is the same as `*`.
                    if parts.last() != Some(&Part::Star) {
                        parts.push(Part::Star);
                    }
                }
                '?' if wildcards => {
                    flush(&mut text, &mut parts);
                    parts.push(Part::One);
                }
                _ => text.push(c),
            }
        }
        flush(&mut text, &mut parts);
        Ok(Pattern {
            source: source.to_owned(),
            parts,
            has_vars,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `text` matches, with variables taken from `ctx`. A variable whose key the context
    /// lacks (and which has no default) makes the pattern match nothing, as in AWS.
    /// `ignore_case`: ASCII case-insensitive (actions).
    pub fn matches(&self, text: &str, ctx: &Context, ignore_case: bool) -> bool {
        let mut small: [Atom<'_>; 8] = [Atom::Star; 8];
        let mut big = Vec::new();
        let atoms: &[Atom<'_>] = if self.parts.len() <= small.len() {
            for (slot, part) in small.iter_mut().zip(&self.parts) {
                match resolve(part, ctx) {
                    Some(a) => *slot = a,
                    None => return false,
                }
            }
            &small[..self.parts.len()]
        } else {
            for part in &self.parts {
                match resolve(part, ctx) {
                    Some(a) => big.push(a),
                    None => return false,
                }
            }
            &big
        };
        match_atoms(atoms, text, ignore_case)
    }

    /// The pattern with its variables replaced by their values (literal text), or `None` when a
    /// variable has no value. For operators that compare without wildcards.
    pub fn resolve_literal<'a>(&'a self, ctx: &'a Context) -> Option<std::borrow::Cow<'a, str>> {
        if !self.has_vars {
            if let [Part::Text(t)] = self.parts.as_slice() {
                return Some(std::borrow::Cow::Borrowed(t));
            }
        }
        let mut out = String::new();
        for part in &self.parts {
            match resolve(part, ctx)? {
                Atom::Lit(t) => out.push_str(t),
                Atom::Star => out.push('*'),
                Atom::One => out.push('?'),
            }
        }
        Some(std::borrow::Cow::Owned(out))
    }
}

fn flush(text: &mut String, parts: &mut Vec<Part>) {
    if !text.is_empty() {
        parts.push(Part::Text(std::mem::take(text)));
    }
}

fn resolve<'a>(part: &'a Part, ctx: &'a Context) -> Option<Atom<'a>> {
    Some(match part {
        Part::Text(t) => Atom::Lit(t),
        Part::Star => Atom::Star,
        Part::One => Atom::One,
        Part::Var { key, default } => match ctx.get_lowercase(key).and_then(|v| v.first()) {
            Some(v) => Atom::Lit(v),
            None => Atom::Lit(default.as_deref()?),
        },
    })
}

fn char_len(text: &str, at: usize) -> usize {
    text[at..].chars().next().map_or(1, char::len_utf8)
}

fn lit_at(text: &str, at: usize, lit: &str, ignore_case: bool) -> bool {
    let Some(t) = text.as_bytes().get(at..at + lit.len()) else {
        return false;
    };
    if ignore_case {
        t.eq_ignore_ascii_case(lit.as_bytes())
    } else {
        t == lit.as_bytes()
    }
}

/// Glob matching with one backtrack point (the last `*`): linear in practice, at worst
/// `O(pattern * text)`, never exponential.
fn match_atoms(atoms: &[Atom<'_>], text: &str, ignore_case: bool) -> bool {
    let (mut ai, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if ai < atoms.len() {
            match atoms[ai] {
                // A trailing `*` takes whatever is left.
                Atom::Star if ai + 1 == atoms.len() => return true,
                Atom::Star => {
                    star = Some((ai + 1, ti));
                    ai += 1;
                    continue;
                }
                Atom::One if ti < text.len() => {
                    ti += char_len(text, ti);
                    ai += 1;
                    continue;
                }
                Atom::Lit(l) if lit_at(text, ti, l, ignore_case) => {
                    ti += l.len();
                    ai += 1;
                    continue;
                }
                _ => {}
            }
        } else if ti == text.len() {
            return true;
        }
        match star {
            Some((sa, st)) if st < text.len() => {
                let mut next = st + char_len(text, st);
                // The `*` can only end where the literal after it begins: jump there.
                if let (Some(Atom::Lit(l)), false) = (atoms.get(sa), ignore_case) {
                    match text[next..].find(l) {
                        Some(at) => next += at,
                        None => return false,
                    }
                }
                star = Some((sa, next));
                ai = sa;
                ti = next;
            }
            _ => return false,
        }
    }
}

/// Whether `text` matches the wildcard `pattern` (`*`, `?`; no variables), case-sensitively.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    match Pattern::compile(pattern, false, true) {
        Ok(p) => p.matches(text, &Context::default(), false),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "anything/at/all"));
        assert!(glob_match("arn:aws:s3:::b/*", "arn:aws:s3:::b/k/x"));
        assert!(!glob_match("arn:aws:s3:::b/*", "arn:aws:s3:::b"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("a?c", "añc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!glob_match("*a*b*c*", "xxaxxcxxbxx"));
        assert!(glob_match("a*a*a*a*b", &format!("{}b", "a".repeat(50))));
        assert!(!glob_match("a*a*a*a*b", &"a".repeat(5000)));
        assert!(!glob_match("ABC", "abc"));
        // The `*` jumps to each place its next literal starts, not only the first.
        assert!(glob_match("*ab", "aab"));
        assert!(glob_match("*ab", "abab"));
        assert!(!glob_match("*ab", "aba"));
        assert!(glob_match("a*bc", "abxbbc"));
        assert!(glob_match("a*b?d", "abxbcd"));
        assert!(glob_match("x*é*z", "xaéébz"));
        assert!(!glob_match("x*é*z", "xaz"));
        assert!(glob_match("a*", "a"));
        assert!(glob_match("a*", "añ"));
        assert!(!glob_match("a*", ""));
    }

    #[test]
    fn variables_and_escapes() {
        let mut ctx = Context::default();
        ctx.insert("aws:username", "alice");
        let p = Pattern::compile("arn:aws:s3:::home/${aws:username}/*", true, true).unwrap();
        assert!(p.matches("arn:aws:s3:::home/alice/x", &ctx, false));
        assert!(!p.matches("arn:aws:s3:::home/bob/x", &ctx, false));
        // Key names are case-insensitive.
        let p = Pattern::compile("${AWS:UserName}", true, true).unwrap();
        assert!(p.matches("alice", &ctx, false));
        // A missing variable matches nothing; a default stands in.
        let p = Pattern::compile("${aws:userid}", true, true).unwrap();
        assert!(!p.matches("", &ctx, false));
        let p = Pattern::compile("x/${aws:userid, 'none'}", true, true).unwrap();
        assert!(p.matches("x/none", &ctx, false));
        // Escapes are literal, not wildcards.
        let p = Pattern::compile("a${*}b${?}${$}", true, true).unwrap();
        assert!(p.matches("a*b?$", &ctx, false));
        assert!(!p.matches("axxb?$", &ctx, false));
        // A value with wildcard characters is matched literally.
        ctx.set("aws:username", "*");
        let p = Pattern::compile("${aws:username}", true, true).unwrap();
        assert!(p.matches("*", &ctx, false));
        assert!(!p.matches("bob", &ctx, false));
        // Without variables (version 2008-10-17) it is all text.
        let p = Pattern::compile("${aws:username}", false, true).unwrap();
        assert!(p.matches("${aws:username}", &ctx, false));
        assert!(Pattern::compile("${aws:username", true, true).is_err());
        assert!(Pattern::compile("${a b}", true, true).is_err());
    }
}
