//! The kubelet's log lines as operators of the Go kubelet read them: klog's text header by
//! default, and upstream's JSON with `--logging-format=json` (`logging.format` in the
//! `KubeletConfiguration`).
//!
//! - **text** mirrors klog's `formatHeader` (`k8s.io/klog/v2/klog.go`) and its structured
//!   `InfoS`/`ErrorS` output (`printS`, `k8s.io/klog/v2/internal/serialize/keyvalues.go`):
//!   `Lmmdd hh:mm:ss.uuuuuu    1234 file.rs:42] "message" err="…" key="value" n=3`, with L one of
//!   `I`, `W`, `E` (tracing's debug and trace lines are `I`, as klog's `V(n)` lines), the local time
//!   in microseconds, and the process id right-aligned in 7 columns, as klog prints it (its
//!   header comment says "threadid" but the code prints `os.Getpid()`; so does this one). The
//!   message and every string, `Display` or error value is quoted with Go's `strconv.Quote`
//!   rules; numbers and booleans are bare. One deviation: klog writes a value with a line break
//!   over several lines (`key=<` …), this one keeps each event on one line (`\n`), so line-based
//!   tools keep working.
//! - **json** mirrors `staging/src/k8s.io/component-base/logs/json/json.go` (zap through zapr):
//!   `{"ts":<unix milliseconds, float>,"caller":"dir/file.rs:42","msg":"…",<context>,"v":0,<fields>,"err":"…"}`;
//!   error lines carry no `"v"` (zapr's error entries have none), warnings are `v` 0 (klog
//!   hands them to its logger as info).
//!
//! In both, a field named `error` is written as upstream's `err`, and the fields of the spans an
//! event is in (the kubelet's pod context, `pod=…`) are written with it, outermost first, before
//! the event's own (klog's `WithValues` context comes first too): no line loses its context.
//!
//! `-v`/`--v` maps to tracing levels by upstream's conventions (`docs/devel/logging.md`: V(2)
//! steady-state detail, V(4) debug, V(5) trace), see [`filter_directives`]; `RUST_LOG`, when set,
//! replaces the whole filter.

use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// `--logging-format`: upstream's two formats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// klog's text lines (upstream's default).
    #[default]
    Text,
    /// One JSON object a line, upstream's keys.
    Json,
}

impl Format {
    /// The format named `name` as `logging.format` spells it (`text`, `json`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "text" => Some(Self::Text),
            "json" => Some(Self::Json),
            _ => None,
        }
    }
}

/// The crates whose lines `-v` turns up (the dependencies stay at warnings until `-v=4`).
const KUBELET_CRATES: &[&str] = &[
    "kubelet",
    "kubelet_core",
    "kubelet_cri",
    "kubelet_pleg",
    "kubelet_status",
    "kubelet_volumes",
];

/// The tracing level of the kubelet's crates at `-v=verbosity`: 0–1 info, 2–4 debug, 5+ trace.
fn kubelet_level(verbosity: u8) -> Level {
    match verbosity {
        0 | 1 => Level::INFO,
        2..=4 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// The `-v` at which a line of `level` shows (the JSON format's `"v"`).
fn verbosity_of(level: Level) -> u8 {
    match level {
        Level::TRACE => 5,
        Level::DEBUG => 2,
        _ => 0,
    }
}

/// The default filter at `-v=verbosity` (used when `RUST_LOG` is not set): the kubelet's crates
/// at [`kubelet_level`], other crates at warnings (info from `-v=4`, upstream's "debug-level
/// verbosity"). kube's own line for a failed request names neither the request nor the cause
/// (`failed with error client error (SendRequest)`): the client's request layer logs it instead
/// (`cluster::request_metrics`), so kube's is off.
pub fn filter_directives(verbosity: u8) -> String {
    let deps = if verbosity >= 4 { "info" } else { "warn" };
    let level = kubelet_level(verbosity).as_str().to_ascii_lowercase();
    let mut directives = format!("{deps},kube_client::client::builder=off");
    for krate in KUBELET_CRATES {
        let _ = write!(directives, ",{krate}={level}");
    }
    directives
}

/// The moment of a line, in the two forms the formats print.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stamp {
    /// Milliseconds since the Unix epoch (JSON's `ts`).
    pub unix_millis: f64,
    /// Local month (1–12), day, hour, minute, second and microsecond (klog's header).
    pub local: [u32; 6],
}

impl Stamp {
    /// Now, in the machine's time zone.
    pub fn now() -> Self {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let secs = libc::time_t::try_from(since.as_secs()).unwrap_or(0);
        Self {
            unix_millis: since.as_secs_f64() * 1000.0,
            local: local_time(secs, since.subsec_micros()),
        }
    }
}

/// `secs` broken down in the local time zone (UTC if the C library cannot tell).
#[allow(unsafe_code)]
fn local_time(secs: libc::time_t, micros: u32) -> [u32; 6] {
    // SAFETY: `localtime_r` writes only into `tm`, which lives for the call, and reads `secs`;
    // unlike `localtime` it keeps no shared buffer, so concurrent calls are fine. A null return
    // (out of range) leaves `tm` zeroed.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    };
    let field = |v: libc::c_int| u32::try_from(v).unwrap_or(0);
    [
        field(tm.tm_mon) + 1,
        field(tm.tm_mday),
        field(tm.tm_hour),
        field(tm.tm_min),
        field(tm.tm_sec),
        micros,
    ]
}

/// The event formatter (see the [module docs](self)); pair it with [`Fields`] of the same
/// format so span fields are rendered alike.
#[derive(Clone, Copy, Debug)]
pub struct Klog {
    format: Format,
    pid: u32,
    now: fn() -> Stamp,
}

impl Klog {
    /// Lines of `format` with this process's id and the clock.
    pub fn new(format: Format) -> Self {
        Self {
            format,
            pid: std::process::id(),
            now: Stamp::now,
        }
    }

    /// Lines with a given process id and clock (tests).
    #[cfg(test)]
    fn fixed(format: Format, pid: u32, now: fn() -> Stamp) -> Self {
        Self { format, pid, now }
    }
}

/// The span field formatter: each field as ` key=value` (text) or `,"key":value` (JSON), kept in
/// the span's extensions and copied into every line of an event inside it.
#[derive(Clone, Copy, Debug)]
pub struct Fields {
    format: Format,
}

impl Fields {
    /// Span fields in `format`.
    pub fn new(format: Format) -> Self {
        Self { format }
    }
}

impl<'w> FormatFields<'w> for Fields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = Collect::new(self.format, false);
        fields.record(&mut visitor);
        writer.write_str(&visitor.fields)
    }

    fn add_fields(
        &self,
        current: &'w mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        // Each fragment carries its own separator: nothing to add between them.
        let mut visitor = Collect::new(self.format, false);
        fields.record(&mut visitor);
        current.fields.push_str(&visitor.fields);
        Ok(())
    }
}

/// Go's `strconv.Quote`: `"`-delimited, with `\"`, `\\`, `\n`, … and `\xNN`/`\uNNNN` for other
/// control characters; printable Unicode is kept.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\u{0b}' => out.push_str("\\v"),
            c if (c as u32) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Collects an event's (or a span's) fields in one format.
struct Collect {
    format: Format,
    /// Whether `message` is the event's message (events) or a field like the others (spans).
    take_message: bool,
    message: String,
    err: Option<String>,
    /// The rendered fields, each with its leading separator.
    fields: String,
    /// A `log` crate record's source (`log.file`, `log.line`), bridged by `tracing-log`.
    log_file: Option<String>,
    log_line: Option<u64>,
}

impl Collect {
    fn new(format: Format, take_message: bool) -> Self {
        Self {
            format,
            take_message,
            message: String::new(),
            err: None,
            fields: String::new(),
            log_file: None,
            log_line: None,
        }
    }

    /// Upstream's key for a field: `err` for errors.
    fn key(field: &Field) -> &'static str {
        match field.name() {
            "error" => "err",
            name => name,
        }
    }

    /// Writes `key` with a value already rendered for the format (quoted or bare).
    fn push(&mut self, key: &str, rendered: &str) {
        match self.format {
            Format::Text => {
                let _ = write!(self.fields, " {key}={rendered}");
            }
            Format::Json => {
                let _ = write!(self.fields, ",{}:{rendered}", json_string(key));
            }
        }
    }

    fn quoted(&self, s: &str) -> String {
        match self.format {
            Format::Text => go_quote(s),
            Format::Json => json_string(s),
        }
    }

    /// A text value: the message, the error (written apart from the fields on events, as
    /// upstream's `err`), or a quoted field.
    fn text(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" if self.take_message => self.message = value,
            "log.file" => self.log_file = Some(value),
            "log.target" | "log.module_path" => {}
            "error" | "err" if self.take_message => self.err = Some(value),
            _ => {
                let rendered = self.quoted(&value);
                self.push(Self::key(field), &rendered);
            }
        }
    }

    /// A number or boolean, bare in both formats.
    fn bare(&mut self, field: &Field, value: impl fmt::Display) {
        let rendered = value.to_string();
        if field.name() == "log.line" {
            self.log_line = rendered.parse().ok();
            return;
        }
        self.push(Self::key(field), &rendered);
    }
}

impl Visit for Collect {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, value.to_owned());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.text(field, kubelet_core::error::chain(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.bare(field, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.bare(field, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if value.is_finite() {
            self.bare(field, value);
        } else {
            self.text(field, value.to_string());
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.bare(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%value` and `?value` fields: a number or boolean stays bare, anything else is text
        // (klog quotes a `fmt.Stringer` too).
        let text = format!("{value:?}");
        let is_bare = field.name() != "message"
            && (text == "true"
                || text == "false"
                || text.parse::<i64>().is_ok()
                || text.parse::<u64>().is_ok());
        // `?string` prints a Rust string literal: quote its text once, not the literal.
        let text = match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(_) => serde_json::from_str::<String>(&text).unwrap_or(text),
            None => text,
        };
        if is_bare {
            self.bare(field, text);
        } else {
            self.text(field, text);
        }
    }
}

/// The last `n` components of a source path (`n` = 1: klog's base name; 2: zap's short caller).
fn trim_path(path: &str, n: usize) -> &str {
    let mut cut = path.len();
    for _ in 0..n {
        match path[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return path,
        }
    }
    &path[cut + 1..]
}

impl<S, N> FormatEvent<S, N> for Klog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut event_fields = Collect::new(self.format, true);
        event.record(&mut event_fields);
        let meta = event.metadata();
        let file = event_fields
            .log_file
            .clone()
            .or_else(|| meta.file().map(str::to_owned));
        let line = event_fields.log_line.or(meta.line().map(u64::from));
        let mut context = String::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                if let Some(fields) = span.extensions().get::<FormattedFields<N>>() {
                    context.push_str(fields);
                }
            }
        }
        let level = *meta.level();
        let stamp = (self.now)();
        match self.format {
            Format::Text => {
                let severity = match level {
                    Level::ERROR => 'E',
                    Level::WARN => 'W',
                    _ => 'I',
                };
                let [month, day, hour, minute, second, micros] = stamp.local;
                let (file, line) = match (&file, line) {
                    (Some(file), Some(line)) => (trim_path(file, 1), line),
                    _ => ("???", 1),
                };
                write!(
                    writer,
                    "{severity}{month:02}{day:02} {hour:02}:{minute:02}:{second:02}.{micros:06} {:>7} {file}:{line}] {}",
                    self.pid,
                    go_quote(&event_fields.message),
                )?;
                if let Some(err) = &event_fields.err {
                    write!(writer, " err={}", go_quote(err))?;
                }
                writeln!(writer, "{context}{}", event_fields.fields)
            }
            Format::Json => {
                write!(writer, "{{\"ts\":{}", json_number(stamp.unix_millis))?;
                if let (Some(file), Some(line)) = (&file, line) {
                    let caller = format!("{}:{line}", trim_path(file, 2));
                    write!(writer, ",\"caller\":{}", json_string(&caller))?;
                }
                write!(writer, ",\"msg\":{}", json_string(&event_fields.message))?;
                writer.write_str(&context)?;
                if level != Level::ERROR {
                    write!(writer, ",\"v\":{}", verbosity_of(level))?;
                }
                writer.write_str(&event_fields.fields)?;
                if let Some(err) = &event_fields.err {
                    write!(writer, ",\"err\":{}", json_string(err))?;
                }
                writeln!(writer, "}}")
            }
        }
    }
}

/// A finite float as JSON (`serde_json`'s shortest round-trip form).
fn json_number(value: f64) -> String {
    serde_json::Number::from_f64(value).map_or_else(|| "0".into(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// 1 December 2026, 23:04:49.123456 (local time as given, not computed).
    fn fixed_clock() -> Stamp {
        Stamp {
            unix_millis: 1_796_166_289_123.456,
            local: [12, 1, 23, 4, 49, 123_456],
        }
    }

    /// A writer that keeps what it was given.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    /// The lines `log` writes in `format` at `trace` (pid 1234, the fixed clock).
    fn lines(format: Format, log: impl FnOnce()) -> Vec<String> {
        let out = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .event_format(Klog::fixed(format, 1234, fixed_clock))
                .fmt_fields(Fields::new(format))
                .with_writer(out.clone()),
        );
        tracing::subscriber::with_default(subscriber, log);
        let text = String::from_utf8(out.0.lock().expect("buffer").clone()).expect("utf-8");
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn an_info_line_has_klogs_header_the_quoted_message_and_its_spans_fields() {
        let mut line = 0;
        let lines = lines(Format::Text, || {
            let span = tracing::info_span!("sync", pod = "default/web-0");
            let _entered = span.enter();
            line = line!() + 1;
            tracing::info!(
                container = "app",
                restarts = 3,
                ready = true,
                "Container started"
            );
        });
        assert_eq!(
            lines,
            [format!(
                "I1201 23:04:49.123456    1234 log_format.rs:{line}] \"Container started\" pod=\"default/web-0\" container=\"app\" restarts=3 ready=true"
            )]
        );
    }

    #[test]
    fn warnings_and_errors_are_w_and_e_and_errors_are_err() {
        let lines = lines(Format::Text, || {
            tracing::warn!("slow");
            let e = std::io::Error::other("connection refused");
            tracing::error!(error = &e as &dyn std::error::Error, node = "n1", "failed");
            tracing::debug!("detail");
        });
        assert!(
            lines[0].starts_with("W1201 23:04:49.123456"),
            "{}",
            lines[0]
        );
        assert!(lines[0].ends_with("] \"slow\""), "{}", lines[0]);
        assert!(lines[1].starts_with("E1201 "), "{}", lines[1]);
        assert!(
            lines[1].ends_with("] \"failed\" err=\"connection refused\" node=\"n1\""),
            "{}",
            lines[1]
        );
        assert!(lines[2].starts_with("I1201 "), "{}", lines[2]);
    }

    #[test]
    fn strings_are_quoted_as_gos_percent_q() {
        assert_eq!(go_quote("plain"), "\"plain\"");
        assert_eq!(
            go_quote("say \"hi\"\nback\\slash\ttab\u{1b}[0m\u{7f}é"),
            r#""say \"hi\"\nback\\slash\ttab\x1b[0m\x7fé""#
        );
        let lines = lines(Format::Text, || {
            tracing::info!(path = "a\"b\nc", debug = ?"x\"y", "two\nlines");
        });
        assert_eq!(lines.len(), 1, "one line per event: {lines:?}");
        assert!(
            lines[0].ends_with(r#"] "two\nlines" path="a\"b\nc" debug="x\"y""#),
            "{}",
            lines[0]
        );
    }

    #[test]
    fn json_lines_have_upstreams_keys() {
        let lines = lines(Format::Json, || {
            let span = tracing::info_span!("sync", pod = "default/web-0");
            let _entered = span.enter();
            tracing::info!(n = 3, "Container \"app\" started");
            tracing::debug!("detail");
            let e = std::io::Error::other("refused");
            tracing::error!(error = &e as &dyn std::error::Error, "failed");
        });
        let parsed: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(parsed[0]["ts"], serde_json::json!(1_796_166_289_123.456));
        assert!(
            parsed[0]["caller"]
                .as_str()
                .is_some_and(|c| c.starts_with("src/log_format.rs:")),
            "{}",
            parsed[0]
        );
        assert_eq!(parsed[0]["msg"], "Container \"app\" started");
        assert_eq!(parsed[0]["v"], 0);
        assert_eq!(parsed[0]["pod"], "default/web-0");
        assert_eq!(parsed[0]["n"], 3);
        assert_eq!(parsed[1]["v"], 2);
        assert_eq!(parsed[2]["err"], "refused");
        assert!(
            parsed[2].get("v").is_none(),
            "errors have no v: {}",
            lines[2]
        );
        // Upstream's key order: ts, caller, msg, context, v, fields.
        assert!(lines[0].starts_with("{\"ts\":"), "{}", lines[0]);
        let order: Vec<usize> = ["\"caller\"", "\"msg\"", "\"pod\"", "\"v\"", "\"n\""]
            .iter()
            .map(|k| lines[0].find(k).unwrap_or(usize::MAX))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{}", lines[0]);
    }

    #[test]
    fn verbosity_maps_to_upstreams_levels() {
        assert_eq!(
            filter_directives(0),
            "warn,kube_client::client::builder=off,kubelet=info,kubelet_core=info,kubelet_cri=info,kubelet_pleg=info,kubelet_status=info,kubelet_volumes=info"
        );
        assert!(filter_directives(2).contains(",kubelet=debug,"));
        assert!(filter_directives(2).starts_with("warn,"));
        assert!(filter_directives(4).starts_with("info,"));
        assert!(filter_directives(5).contains(",kubelet_core=trace,"));
        for v in 0..10 {
            let filter = filter_directives(v);
            assert!(
                tracing_subscriber::EnvFilter::builder()
                    .parse(&filter)
                    .is_ok(),
                "{filter}"
            );
        }
    }

    #[test]
    fn the_local_time_is_broken_down() {
        let [month, day, hour, minute, second, micros] = local_time(1_796_166_289, 7);
        assert!((1..=12).contains(&month) && (1..=31).contains(&day));
        assert!(hour < 24 && minute < 60 && second < 61);
        assert_eq!(micros, 7);
    }
}
