//! Criterion benchmarks live in benches/.
