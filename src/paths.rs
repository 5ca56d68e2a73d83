//! ZooKeeper path rules, checked before anything is sent.
//!
//! The rules are the server's own (`PathUtils.validatePath`): a path is absolute, has no empty,
//! `.` or `..` segment, no trailing slash (except the root, and except the prefix of a
//! sequential create), and none of the characters the server refuses. The server counts
//! characters in UTF-16, so anything outside the Basic Multilingual Plane (a surrogate pair
//! there) is refused too.

use crate::error::{Error, Result};

/// Longest path we accept. ZooKeeper itself only bounds a whole request by `jute.maxbuffer`
/// (1 MiB by default); a path this long is a bug in the caller, not a lock name.
pub const MAX_PATH_LEN: usize = 4096;

fn invalid(path: &str, reason: &'static str) -> Error {
    Error::InvalidPath {
        path: path.to_owned(),
        reason,
    }
}

fn forbidden_char(c: char) -> bool {
    matches!(c,
        '\u{1}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{e000}'..='\u{f8ff}'
        | '\u{fff0}'..='\u{ffff}')
        || (c as u32) > 0xffff
}

/// Checks `path` against ZooKeeper's rules. `sequential` allows the trailing slash that a
/// sequential create may end with (the server appends the counter).
pub fn validate(path: &str, sequential: bool) -> Result<()> {
    let Some(body) = body_of(path, sequential)? else {
        return Ok(());
    };
    // One pass over the bytes while they are printable ASCII, which holds no character the
    // server refuses: the common case decodes nothing (this runs on every request). '/' is
    // ASCII, so a segment ends only between UTF-8 characters. At the first other byte, the
    // whole path is checked character by character instead, segment by segment as before
    // (the segments passed so far were fine, so the first fault found is the same).
    let rest = &body.as_bytes()[1..];
    // Two folds without an early exit (the compiler makes them wide): is all of it printable
    // ASCII, and could any segment be empty, `.` or `..` (it would begin at the start or
    // after a '/', with a '/' or a '.').
    let printable = rest
        .iter()
        .fold(true, |ok, &b| ok & (b.wrapping_sub(0x20) < 0x5f));
    let suspect = rest.first().is_none_or(|&b| b == b'/' || b == b'.')
        || rest.windows(2).fold(false, |s, w| {
            s | ((w[0] == b'/') & ((w[1] == b'/') | (w[1] == b'.')))
        });
    if printable && !suspect {
        return Ok(());
    }
    let mut from = 0;
    for at in 0..=rest.len() {
        let b = rest.get(at).copied().unwrap_or(b'/');
        if b != b'/' {
            if (0x20..0x7f).contains(&b) {
                continue;
            }
            return validate_segments(path, &body[1..]);
        }
        check_segment(path, &rest[from..at])?;
        from = at + 1;
    }
    Ok(())
}

/// The rules on the path as a whole: the path without a sequential create's trailing slash,
/// or `None` for the root, which has no segments.
fn body_of(path: &str, sequential: bool) -> Result<Option<&str>> {
    if path.is_empty() {
        return Err(invalid(path, "a path cannot be empty"));
    }
    if !path.starts_with('/') {
        return Err(invalid(path, "a path must start with '/'"));
    }
    if path.len() > MAX_PATH_LEN {
        return Err(invalid(path, "path longer than 4096 bytes"));
    }
    if path.len() == 1 {
        return Ok(None);
    }
    let body = if sequential && path.ends_with('/') {
        &path[..path.len() - 1]
    } else {
        path
    };
    if body.ends_with('/') {
        return Err(invalid(path, "a path must not end with '/'"));
    }
    Ok(Some(body))
}

/// A segment may be neither empty nor `.` nor `..`.
fn check_segment(path: &str, segment: &[u8]) -> Result<()> {
    match segment {
        b"" => Err(invalid(path, "empty segment ('//')")),
        b"." | b".." => Err(invalid(path, "'.' and '..' segments are not allowed")),
        _ => Ok(()),
    }
}

/// Every segment of `rest` (a path without its leading '/'), character by character.
fn validate_segments(path: &str, rest: &str) -> Result<()> {
    for segment in rest.split('/') {
        check_segment(path, segment.as_bytes())?;
        if segment.contains('\0') {
            return Err(invalid(path, "NUL character"));
        }
        if segment.chars().any(forbidden_char) {
            return Err(invalid(path, "character ZooKeeper refuses"));
        }
    }
    Ok(())
}

/// Checks a single node name (no slashes) such as a lock prefix.
pub fn validate_name(name: &str) -> Result<()> {
    if name.contains('/') {
        return Err(invalid(name, "a node name cannot contain '/'"));
    }
    validate(&format!("/{name}"), false).map_err(|e| match e {
        Error::InvalidPath { reason, .. } => invalid(name, reason),
        other => other,
    })
}

/// `parent` + `/` + `child`, without doubling the slash at the root.
pub fn join(parent: &str, child: &str) -> String {
    let parent = if parent == "/" { "" } else { parent };
    let mut path = String::with_capacity(parent.len() + 1 + child.len());
    path.push_str(parent);
    path.push('/');
    path.push_str(child);
    path
}

/// The parent of a valid path; `None` for the root.
pub fn parent(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) if path.len() > 1 => Some("/"),
        Some(0) | None => None,
        Some(i) => Some(&path[..i]),
    }
}

/// The last segment of a valid path.
pub fn node_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rules as first written, character by character (the whole-path rules, and every
    /// segment through the character check): the byte-wise check must give the same verdict
    /// and the same reason for every path.
    fn by_characters(path: &str, sequential: bool) -> Result<()> {
        match body_of(path, sequential)? {
            Some(body) => validate_segments(path, &body[1..]),
            None => Ok(()),
        }
    }

    fn reason(r: Result<()>) -> Option<&'static str> {
        match r {
            Ok(()) => None,
            Err(Error::InvalidPath { reason, .. }) => Some(reason),
            Err(_) => Some("another error"),
        }
    }

    proptest! {
    #[test]
    fn the_byte_check_agrees_with_the_character_check(
        path in "/?(/|\\.|a|\u{0}|\u{1}|ü|\u{e000}|\u{1f600}){0,8}",
        sequential in any::<bool>(),
    ) {
        prop_assert_eq!(reason(validate(&path, sequential)), reason(by_characters(&path, sequential)));
    }
    }

    /// Every path of up to four characters over an alphabet with the boundaries of both
    /// checks (a reviewer's suggestion: the random one missed the edges of printable ASCII).
    #[test]
    fn the_byte_check_agrees_on_every_short_path() {
        let alphabet = [
            '/',
            '.',
            'a',
            ' ',
            '~',
            '\0',
            '\u{1f}',
            '\u{7f}',
            '\u{85}',
            'ü',
            '\u{fff0}',
            '\u{1f600}',
        ];
        let mut paths = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..4 {
            last = last
                .iter()
                .flat_map(|p| alphabet.iter().map(move |c| format!("{p}{c}")))
                .collect();
            paths.extend(last.iter().cloned());
        }
        paths.push(format!("/{}", "a".repeat(MAX_PATH_LEN)));
        for path in &paths {
            for sequential in [false, true] {
                assert_eq!(
                    reason(validate(path, sequential)),
                    reason(by_characters(path, sequential)),
                    "{path:?} {sequential}"
                );
            }
        }
    }

    #[test]
    fn the_byte_check_agrees_on_paths_with_two_faults() {
        for path in [
            "/a/..",
            "/../a",
            "/a\0/..",
            "/../a\0",
            "/ü/./\u{1}",
            "/\u{1}/.",
            "/a//\0",
        ] {
            assert_eq!(
                reason(validate(path, false)),
                reason(by_characters(path, false)),
                "{path}"
            );
        }
    }

    #[test]
    fn accepts_what_zookeeper_accepts() {
        for p in [
            "/",
            "/a",
            "/a/b-c_d.e",
            "/lock/_c_x-lock-0000000001",
            "/a/..b",
            "/ü",
        ] {
            assert!(validate(p, false).is_ok(), "{p}");
        }
        assert!(validate("/locks/", true).is_ok());
    }

    #[test]
    fn refuses_what_zookeeper_refuses() {
        for p in [
            "",
            "a",
            "/a/",
            "//",
            "/a//b",
            "/.",
            "/a/..",
            "/a/./b",
            "/a\0b",
            "/a\u{1}",
            "/\u{e000}",
            "/😀",
        ] {
            assert!(
                matches!(validate(p, false), Err(Error::InvalidPath { .. })),
                "{p:?}"
            );
        }
        assert!(validate(&"/x".repeat(3000), false).is_err());
        assert!(validate_name("a/b").is_err());
        assert!(validate_name("lock-").is_ok());
    }

    #[test]
    fn joins_and_splits() {
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/"), None);
        assert_eq!(node_name("/a/b"), "b");
    }
}
