//! The binary's command line and its `KubeletConfiguration`, the rules kept in one place
//! each: the file's one struct with every upstream field ([`config`]), upstream's defaulting
//! of zero values in it ([`defaults`]), upstream's field names, which tell an unsupported
//! field from an unknown one ([`fields`]), the flags installers pass that are accepted and
//! ignored with a warning ([`accepted_flags`]), and how the repetitions of a map-valued flag
//! add up ([`map_flags`]).
//!
//! The per-area settings modules (`settings.rs`, `*_settings.rs`, …) each read their fields of
//! the one [`config::KubeletConfiguration`] and merge their flags on top; `cli` depends on
//! none of them (only its tests drive `settings`), so there are no import circles.

pub mod accepted_flags;
pub mod config;
pub mod defaults;
pub mod fields;
pub mod map_flags;

#[cfg(test)]
mod config_tests;
#[cfg(test)]
mod flag_tests;
#[cfg(test)]
mod secure_default_tests;
