//! (being written: #17 visibility)
