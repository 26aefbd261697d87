//! The bench's reading of the kubelet's log. The bench starts the kubelet with
//! `--logging-format=json` ([`FLAG`]): upstream's JSON lines carry the time as Unix milliseconds
//! (`ts`), which the bench compares with containerd's and its own clocks, where klog's text
//! header has local time without a year.

use serde_json::{Map, Value};

/// The flag the bench passes so that [`Line::parse`] reads every line.
pub(crate) const FLAG: &str = "--logging-format=json";

/// One line of the kubelet's JSON log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Line {
    /// Seconds since the Unix epoch.
    pub(crate) at: f64,
    /// The message (`msg`).
    pub(crate) msg: String,
    fields: Map<String, Value>,
}

impl Line {
    /// The line, if it is one of the kubelet's JSON lines.
    pub(crate) fn parse(line: &str) -> Option<Line> {
        let Value::Object(mut fields) = serde_json::from_str(line).ok()? else {
            return None;
        };
        let at = fields.remove("ts")?.as_f64()? / 1e3;
        let msg = fields.remove("msg")?.as_str()?.to_owned();
        Some(Line { at, msg, fields })
    }

    /// A field's value as text (a string as is, a number or boolean as written).
    pub(crate) fn field(&self, key: &str) -> Option<String> {
        match self.fields.get(key)? {
            Value::String(s) => Some(s.clone()),
            v @ (Value::Number(_) | Value::Bool(_)) => Some(v.to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kubelets_json_lines() {
        let line = Line::parse(
            r#"{"ts":1796166289123.5,"caller":"src/app.rs:26","msg":"cri call","v":5,"op":"Version","us":12}"#,
        )
        .expect("a line");
        assert!((line.at - 1_796_166_289.123_5).abs() < 1e-6);
        assert_eq!(line.msg, "cri call");
        assert_eq!(line.field("op").as_deref(), Some("Version"));
        assert_eq!(line.field("us").as_deref(), Some("12"));
        assert_eq!(line.field("nope"), None);
        assert_eq!(
            Line::parse("I1202 03:42:00.716156   21732 app.rs:26] \"x\""),
            None
        );
        assert_eq!(Line::parse("[1]"), None);
    }
}
