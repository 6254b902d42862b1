//! The CSI mount writer and the plain write styles: the crate's testing kit
//! (the `msi-dataplane-testing` crate), under the names the tests use.
#![allow(unused_imports)]

pub use msi_dataplane_testing::{
    CsiMount as AtomicDir, InPlaceWrite, TempDir, delete_then_recreate, write_in_place,
    write_temp_then_rename,
};
