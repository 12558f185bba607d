//! Cross-protocol tests.
