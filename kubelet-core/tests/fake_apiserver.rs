//! Integration tests of the in-process fake API server.
