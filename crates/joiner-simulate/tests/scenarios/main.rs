//! The simulated cluster's scenario tests, one module per subject, in one test binary: each
//! binary links the whole controller (about 100 MB in a debug build), and sixteen of them cost
//! CI gigabytes of disk and a minute of linking for nothing.

mod common;

mod buffers;
mod disruption;
mod disruption_restart;
mod dra;
mod fuzz_corpus;
mod learning_lab;
mod node_class_status;
mod placement_groups;
mod prediction;
mod repair;
mod reservations;
mod restart;
mod safety;
mod static_capacity;
mod takeover;
mod termination;
