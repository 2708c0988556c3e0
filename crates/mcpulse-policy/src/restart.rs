//! (being written: #17)
