//! The binary's command line and `KubeletConfiguration` rules that are kept in one place
//! each: upstream's defaulting of zero values in the config file ([`defaults`]) and the
//! flags installers pass that are accepted and ignored with a warning ([`accepted_flags`]),
//! and upstream's field names, which tell an unsupported field from an unknown one ([`fields`]).
//!
//! The per-area settings modules (`settings.rs`, `*_settings.rs`, …) read the file after
//! these rules ran, so none of them repeats a rule.

pub mod accepted_flags;
pub mod defaults;
pub mod fields;

#[cfg(test)]
mod config_tests;
#[cfg(test)]
mod flag_tests;
#[cfg(test)]
mod secure_default_tests;
