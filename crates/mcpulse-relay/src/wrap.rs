//! (being written: #17 adoption)
