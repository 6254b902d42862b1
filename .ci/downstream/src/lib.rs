//! Empty on purpose: the crate exists for its integration test, `tests/test_my_component.rs`,
//! a copy of the repository's `examples/test_my_component.rs` that `.ci/run` makes.
