//! `sluice archive`: **the server's binlog files, copied as a replica, byte for byte**, so
//! that they outlive the server's retention (for `sluice dump` of last week, and for a
//! pipeline that fell behind a purge).
//!
//! - [`copy`]: which bytes of the replication stream belong in which file (sans-IO);
//! - [`layout`]: file names and order, the index's name, the files a reader needs;
//! - [`dir`]: an archive in a directory, its index, and repair after a crash;
//! - [`store`]: an archive in object storage (S3, GCS, Azure), uploaded from a spool directory;
//! - [`read`]: an archive read back as a replication stream, and whether it covers a purge.

pub mod copy;
pub mod dir;
pub mod layout;
pub mod read;
pub mod store;

pub use copy::{Copier, Op};
pub use dir::DirArchive;
