//! DRA: CEL environment and structured allocator.
