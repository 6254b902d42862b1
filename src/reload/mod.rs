//! Following rotations: the directory watch (one per directory, shared), the swap rule,
//! and `UserAssignedIdentityCredential`, which keeps the last good credential active.
//! Uses `token/` for each credential it builds and `file/` to read the file.

pub(crate) mod options;
pub(crate) mod rule;
pub(crate) mod status;
pub(crate) mod user_assigned;
pub(crate) mod watch;
