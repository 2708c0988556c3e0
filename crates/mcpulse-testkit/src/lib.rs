//! Dev-only test servers. See the modules.
