//! TPC-C (in progress)
