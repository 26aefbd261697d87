//! Shell-style glob matching of one host name label, as Go's `path/filepath.Match` (which
//! upstream `URLsMatch` applies per label): `*` (any run without `/`), `?` (one character but `/`), `[a-z]` and
//! `[^a-z]` classes, `\` escapes. A malformed pattern matches nothing.

/// `true` when `name` matches `pattern`; `None` when the pattern is malformed.
pub(super) fn matches(pattern: &str, name: &str) -> Option<bool> {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    match_from(&p, &n)
}

fn match_from(p: &[char], n: &[char]) -> Option<bool> {
    let Some((&first, rest)) = p.split_first() else {
        return Some(n.is_empty());
    };
    match first {
        '*' => {
            // Validate the rest of the pattern even when the name runs out.
            // `*` never crosses a `/`.
            let span = n.iter().position(|&c| c == '/').unwrap_or(n.len());
            let mut any = false;
            for skip in 0..=span {
                if match_from(rest, &n[skip..])? {
                    any = true;
                    break;
                }
            }
            Some(any)
        }
        '?' => match n.split_first() {
            Some((&c, n_rest)) if c != '/' => match_from(rest, n_rest),
            _ => validate(rest).map(|()| false),
        },
        '[' => {
            let (matched, after) = class(rest, n.first().copied())?;
            if matched {
                match_from(after, &n[1..])
            } else {
                validate(after).map(|()| false)
            }
        }
        '\\' => {
            let (&lit, after) = rest.split_first()?;
            literal(lit, after, n)
        }
        c => literal(c, rest, n),
    }
}

fn literal(c: char, rest: &[char], n: &[char]) -> Option<bool> {
    match n.split_first() {
        Some((&h, n_rest)) if h == c => match_from(rest, n_rest),
        _ => validate(rest).map(|()| false),
    }
}

/// Checks that a pattern is well formed.
fn validate(p: &[char]) -> Option<()> {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '\\' => i += 2,
            '[' => {
                let (_, after) = class(&p[i + 1..], None)?;
                i = p.len() - after.len();
                continue;
            }
            _ => i += 1,
        }
    }
    (i == p.len()).then_some(())
}

/// Matches `c` against the class that starts at `p` (after `[`); returns whether it matched
/// and the pattern after `]`. `c == None` only validates.
fn class(p: &[char], c: Option<char>) -> Option<(bool, &[char])> {
    let (negated, mut p) = match p.split_first() {
        Some(('^', rest)) => (true, rest),
        _ => (false, p),
    };
    let mut matched = false;
    let mut first = true;
    loop {
        match p.split_first() {
            None => return None,
            Some((']', rest)) if !first => {
                let hit = c.is_some_and(|_| matched != negated);
                return Some((hit, rest));
            }
            _ => {}
        }
        first = false;
        let (lo, rest) = class_char(p)?;
        p = rest;
        let mut hi = lo;
        if let Some(('-', rest)) = p.split_first() {
            (hi, p) = class_char(rest)?;
        }
        if c.is_some_and(|c| lo <= c && c <= hi) {
            matched = true;
        }
    }
}

fn class_char(p: &[char]) -> Option<(char, &[char])> {
    match p.split_first()? {
        ('\\', rest) => rest.split_first().map(|(&c, r)| (c, r)),
        (']' | '-', _) => None,
        (&c, rest) => Some((c, rest)),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn go_filepath_match_cases() {
        for (pattern, name, want) in [
            ("abc", "abc", Some(true)),
            ("*", "abc", Some(true)),
            ("*c", "abc", Some(true)),
            ("a*", "a", Some(true)),
            ("a*", "abc", Some(true)),
            ("a*/b", "abc/b", Some(true)),
            ("a*b*c*d*e*", "axbxcxdxe", Some(true)),
            ("ab[c]", "abc", Some(true)),
            ("ab[b-d]", "abc", Some(true)),
            ("ab[e-g]", "abc", Some(false)),
            ("ab[^c]", "abc", Some(false)),
            ("ab[^b-d]", "abc", Some(false)),
            ("ab[^e-g]", "abc", Some(true)),
            ("a\\*b", "a*b", Some(true)),
            ("a\\*b", "ab", Some(false)),
            ("a?b", "a☺b", Some(true)),
            ("a???b", "a☺b", Some(false)),
            ("[a-ζ]*", "α", Some(true)),
            ("*[a-ζ]", "A", Some(false)),
            ("a?b", "a/b", Some(false)),
            ("a*b", "a/b", Some(false)),
            ("[\\]a]", "]", Some(true)),
            ("[\\-]", "-", Some(true)),
            ("[x\\-]", "z", Some(false)),
            ("[", "a", None),
            ("[^", "a", None),
            ("[^bc", "a", None),
            ("a[", "a", None),
            ("a[", "ab", None),
            ("[-]", "-", None),
            ("[a-]", "a", None),
            ("\\", "a", None),
            ("*x", "xxx", Some(true)),
            ("prefix.*", "prefix.x", Some(true)),
            ("*-good", "prefix-good", Some(true)),
            ("k*", "quay", Some(false)),
        ] {
            assert_eq!(matches(pattern, name), want, "{pattern:?} vs {name:?}");
        }
    }
}
