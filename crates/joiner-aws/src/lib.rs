//! Joiner on AWS (see the crate description).
