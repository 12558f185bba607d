//! Crash checks of the engines (placeholder: being built).
