//! Weir's schema registry.

pub mod format;
