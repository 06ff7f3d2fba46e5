//! Joiner on Kubernetes (see the crate description).
