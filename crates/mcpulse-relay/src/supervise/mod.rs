//! (being written: #17 core)
