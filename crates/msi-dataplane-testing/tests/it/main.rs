//! The testing kit's integration tests, in one binary: a module per part of the kit.

#[path = "../../../../tests/support/mod.rs"]
mod support;

mod entra_server;
mod testing_kit;
mod testing_kit_clock;
mod testing_kit_jwt;
mod testing_kit_scripts;
mod testing_kit_servers;
mod testing_kit_static;
mod testing_kit_wait;
