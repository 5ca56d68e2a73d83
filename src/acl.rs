//! Access control: ACL entries, and the usual ACLs for lock paths.
//!
//! ZooKeeper's own default, which this crate keeps unless told otherwise, lets anyone who can
//! reach the server delete a holder's lock node or write `__REVOKE__` into it. Give the client
//! credentials ([`ClientBuilder::authorization`](crate::ClientBuilder::authorization)) and an
//! ACL that keeps others out ([`creator_all_others_read`]), and they get `NoAuth` instead.

use std::ops::BitOr;

/// Rights an ACL entry grants (ZooKeeper's `Perms`), combined with `|`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Permission(u32);

impl Permission {
    /// Read the data and list the children.
    pub const READ: Permission = Permission(1);
    /// Set the data.
    pub const WRITE: Permission = Permission(2);
    /// Create children.
    pub const CREATE: Permission = Permission(4);
    /// Delete children.
    pub const DELETE: Permission = Permission(8);
    /// Set the ACL.
    pub const ADMIN: Permission = Permission(16);
    /// Every right.
    pub const ALL: Permission = Permission(31);

    /// The bits as the protocol carries them.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// From the protocol's bits (unknown bits are kept).
    pub fn from_bits(bits: u32) -> Permission {
        Permission(bits)
    }

    /// True if every right of `other` is granted.
    pub fn contains(self, other: Permission) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Permission {
    type Output = Permission;
    fn bitor(self, rhs: Permission) -> Permission {
        Permission(self.0 | rhs.0)
    }
}

/// Who an ACL entry is for: a scheme and an id within it (`world`/`anyone`, `auth`/``,
/// `digest`/`user:base64(sha1)`, `ip`/`10.0.0.0/8`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Id {
    /// The scheme.
    pub scheme: String,
    /// The id within the scheme.
    pub id: String,
}

impl Id {
    /// An id from its scheme and its id.
    pub fn new(scheme: &str, id: &str) -> Id {
        Id {
            scheme: scheme.to_owned(),
            id: id.to_owned(),
        }
    }
}

/// One ACL entry: `perms` for `id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Acl {
    /// The rights granted.
    pub perms: Permission,
    /// To whom.
    pub id: Id,
}

impl Acl {
    /// An entry granting `perms` to `id`.
    pub fn new(perms: Permission, id: Id) -> Acl {
        Acl { perms, id }
    }
}

/// Everyone may do everything (ZooKeeper's default, `world:anyone`).
pub fn open() -> Vec<Acl> {
    vec![Acl::new(Permission::ALL, Id::new("world", "anyone"))]
}

/// Everyone may read, nobody may change anything.
pub fn read_only() -> Vec<Acl> {
    vec![Acl::new(Permission::READ, Id::new("world", "anyone"))]
}

/// Full rights for the identities the creating connection authenticated as (`auth` scheme).
pub fn creator_all() -> Vec<Acl> {
    vec![Acl::new(Permission::ALL, Id::new("auth", ""))]
}

/// Full rights for the identity that creates the node, read for everyone else. With it on a
/// lock path, clients without the creator's credentials can look but cannot queue, delete a
/// holder's node or revoke it.
pub fn creator_all_others_read() -> Vec<Acl> {
    let mut acl = creator_all();
    acl.extend(read_only());
    acl
}
