//! Go `time.ParseDuration` syntax for flags and config: [`kubelet_core::duration`], the one
//! home of the rule, re-exported for the flag parsers.

pub use kubelet_core::duration::{Error, format, parse};
