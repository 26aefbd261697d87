//! Test utilities: stateful fakes and fixtures.
