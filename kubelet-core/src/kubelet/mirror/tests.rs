//! Tests of mirror pods.
