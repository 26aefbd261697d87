//! `$(VAR)` expansion as upstream's `third_party/forked/golang/expansion` (used for env values,
//! command and args, subPathExpr and exec probe commands).

/// Upstream `third_party/forked/golang/expansion`: `$(VAR)` is replaced by `lookup`, `$$` is
/// an escaped `$`, and an unresolved or malformed reference is kept as written.
pub fn expand(input: &str, mut lookup: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::expand;
    use std::collections::HashMap;

    #[test]
    fn expands_like_upstream() {
        let env: HashMap<&str, &str> = [("A", "1"), ("B", "two")].into();
        let lookup = |n: &str| env.get(n).map(|v| (*v).to_owned());
        assert_eq!(expand("$(A)-$(B)", lookup), "1-two");
        assert_eq!(expand("$(C)", lookup), "$(C)");
        assert_eq!(expand("$$(A)", lookup), "$(A)");
        assert_eq!(expand("cost $5", lookup), "cost $5");
        assert_eq!(expand("end$", lookup), "end$");
        assert_eq!(expand("$(A", lookup), "$(A");
        assert_eq!(expand("é$(A)é$é", lookup), "é1é$é");
    }
}
