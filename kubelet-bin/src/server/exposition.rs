//! The Prometheus text exposition format 0.0.4 (`text/plain; version=0.0.4`) with sample
//! timestamps, as upstream's `/metrics/resource` and `/metrics/cadvisor` are written
//! (`k8s.io/component-base/metrics` over `prometheus/common/expfmt`): families sorted by
//! name, `# HELP` and `# TYPE` lines, label values escaped, timestamps in milliseconds.
//!
//! These two endpoints are built per scrape from the Summary API rather than from a
//! registry of live instruments, and their samples carry timestamps, which prometheus-client
//! (behind `/metrics`, see `super::metrics`) cannot write: hence this small writer beside it.
//! Served as `super::metrics::TEXT_CONTENT_TYPE`.

use std::fmt::Write;

/// A metric type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A monotonic counter.
    Counter,
    /// A gauge.
    Gauge,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// One sample: label pairs, the value and an optional timestamp.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sample {
    /// Label names and values, in any order (written sorted by name).
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
}

/// A metric family.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Family {
    /// The metric name.
    pub name: &'static str,
    /// The help text, stability prefix included (`[STABLE] …`).
    pub help: &'static str,
    /// The type.
    pub kind: Kind,
    /// The samples, in the order written.
    pub samples: Vec<Sample>,
}

impl Family {
    /// An empty family.
    pub(crate) fn new(name: &'static str, kind: Kind, help: &'static str) -> Self {
        Self {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    /// Adds a sample.
    pub(crate) fn push(
        &mut self,
        labels: Vec<(&'static str, String)>,
        value: f64,
        timestamp_ms: Option<i64>,
    ) {
        self.samples.push(Sample {
            labels,
            value,
            timestamp_ms,
        });
    }
}

/// Writes the families that have samples, sorted by name, as the text format.
pub(crate) fn render(mut families: Vec<Family>) -> String {
    families.retain(|f| !f.samples.is_empty());
    families.sort_by(|a, b| a.name.cmp(b.name));
    let mut out = String::new();
    for f in &families {
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
        for s in &f.samples {
            out.push_str(f.name);
            if !s.labels.is_empty() {
                let mut labels: Vec<&(&str, String)> = s.labels.iter().collect();
                labels.sort_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (name, value)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{name}=\"{}\"", escape_label(value));
                }
                out.push('}');
            }
            let _ = write!(out, " {}", number(s.value));
            if let Some(ts) = s.timestamp_ms {
                let _ = write!(out, " {ts}");
            }
            out.push('\n');
        }
    }
    out
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)`, what `expfmt` writes: the shortest digits
/// that read back as `v`, in exponent form (`5.0814976e+07`) when the decimal exponent is
/// below −4 or at least 6, with Prometheus' spellings of the special values.
fn number(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` is the shortest round-tripping mantissa: `5.0814976e7`.
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        // Display never uses an exponent and is also the shortest round trip.
        format!("{v}")
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_go_writes_them() {
        for (v, text) in [
            (0.0, "0"),
            (1.0, "1"),
            (123_456.0, "123456"),
            (1_000_000.0, "1e+06"),
            (50_814_976.0, "5.0814976e+07"),
            (2.183706, "2.183706"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.7e9 + 0.5, "1.7000000005e+09"),
            (-3.0, "-3"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(number(v), text, "{v}");
        }
    }

    #[test]
    fn families_sorted_labels_sorted_and_escaped_empty_ones_left_out() {
        let mut b = Family::new("b_total", Kind::Counter, "[STABLE] B.");
        b.push(
            vec![("pod", "p".into()), ("container", "c\"q\"\n".into())],
            2.5,
            Some(1_700_000_000_123),
        );
        let mut a = Family::new("a", Kind::Gauge, "[ALPHA] A\nline.");
        a.push(Vec::new(), 0.0, None);
        let empty = Family::new("c", Kind::Gauge, "C.");
        assert_eq!(
            render(vec![b, empty, a]),
            "# HELP a [ALPHA] A\\nline.\n# TYPE a gauge\na 0\n\
             # HELP b_total [STABLE] B.\n# TYPE b_total counter\n\
             b_total{container=\"c\\\"q\\\"\\n\",pod=\"p\"} 2.5 1700000000123\n"
        );
    }
}
