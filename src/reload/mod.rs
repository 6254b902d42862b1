//! Following rotations: `UserAssignedIdentityCredential`, which keeps the last good
//! credential active (the whole rotation path: `user_assigned`), the swap rule (`rule`),
//! the directory watch shared by every credential in the process (`watch`), the status
//! (`status`) and the options (`options`). Uses `token/` for each credential it builds
//! and `file/` to read the file.

pub(crate) mod options;
pub(crate) mod rule;
pub(crate) mod status;
pub(crate) mod user_assigned;
pub(crate) mod watch;
