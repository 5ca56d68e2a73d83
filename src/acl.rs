//! Access control for lock paths.
//!
//! ZooKeeper's own default, which this crate keeps unless told otherwise, lets anyone who can
//! reach the server delete a holder's lock node or write `__REVOKE__` into it. Give the client
//! credentials ([`ClientBuilder::authorization`](crate::ClientBuilder::authorization)) and an
//! ACL that keeps others out ([`creator_all_others_read`]), and they get `NoAuth` instead.

pub use zookeeper::{Acl, Permission};

/// Full rights for the identity that creates the node, read for everyone else. With it on a
/// lock path, clients without the creator's credentials can look but cannot queue, delete a
/// holder's node or revoke it.
pub fn creator_all_others_read() -> Vec<Acl> {
    let mut acl = Acl::creator_all().clone();
    acl.extend(Acl::read_unsafe().iter().cloned());
    acl
}

/// Everyone may do everything (ZooKeeper's default).
pub fn open() -> Vec<Acl> {
    Acl::open_unsafe().clone()
}
