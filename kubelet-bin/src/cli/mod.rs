//! The binary's command line and `KubeletConfiguration` rules that are kept in one place
//! each: upstream's defaulting of zero values in the config file ([`defaults`]).
//!
//! The per-area settings modules (`settings.rs`, `*_settings.rs`, …) read the file after
//! these rules ran, so none of them repeats a rule.

pub mod defaults;

#[cfg(test)]
mod config_tests;
