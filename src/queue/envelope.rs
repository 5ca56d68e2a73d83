//! The bytes of a queue node, as Curator writes and reads them (its package-private
//! `ItemSerializer`): a version, then each item as an opcode, a length and its bytes, then an
//! end mark. Big-endian, as Java's `DataOutputStream` writes.

use crate::{Error, Result};

/// The format's version: the node's first four bytes.
const VERSION: u32 = 0x0001_0001;
/// An item follows: its length (4 bytes), then its bytes.
const ITEM: u8 = 0x01;
/// No more items (what follows is ignored).
const END: u8 = 0x02;

/// The bytes of a node holding `items`, in order.
pub(crate) fn encode<I: AsRef<[u8]>>(items: &[I]) -> Result<Vec<u8>> {
    let len: usize = items.iter().map(|i| 5 + i.as_ref().len()).sum();
    let mut out = Vec::with_capacity(4 + len + 1);
    out.extend_from_slice(&VERSION.to_be_bytes());
    for item in items {
        let item = item.as_ref();
        let n = i32::try_from(item.len()).map_err(|_| {
            Error::BadArguments(format!(
                "a queue item of {} bytes does not fit Curator's 31-bit length",
                item.len()
            ))
        })?;
        out.push(ITEM);
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(item);
    }
    out.push(END);
    Ok(out)
}

/// The items of the node at `path` whose data is `bytes`; `Malformed` if they are not in
/// Curator's format (the version, an opcode, a length, or the end mark wrong or missing).
pub(crate) fn decode(path: &str, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
    let bad = |what: String| Error::Malformed {
        path: path.into(),
        what,
    };
    let version = bytes
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| {
            bad(format!(
                "a queue node starts with 4 bytes of version, found {}",
                bytes.len()
            ))
        })?;
    if version != VERSION {
        return Err(bad(format!(
            "queue format version {version:#010x}, not {VERSION:#010x}"
        )));
    }
    let mut at = 4;
    let mut items = Vec::new();
    loop {
        match bytes.get(at) {
            Some(&END) => return Ok(items),
            Some(&ITEM) => {
                let len = bytes
                    .get(at + 1..at + 5)
                    .and_then(|b| <[u8; 4]>::try_from(b).ok())
                    .map(i32::from_be_bytes)
                    .ok_or_else(|| bad(format!("an item's length cut short at byte {}", at + 1)))?;
                let len = usize::try_from(len)
                    .map_err(|_| bad(format!("an item's length is negative ({len})")))?;
                let item = bytes
                    .get(at + 5..at + 5 + len)
                    .ok_or_else(|| bad(format!("an item of {len} bytes cut short")))?;
                items.push(item.to_vec());
                at += 5 + len;
            }
            Some(op) => return Err(bad(format!("opcode {op:#04x} at byte {at}"))),
            None => return Err(bad("no end mark".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_are_curators() {
        // From Curator 5.4's ItemSerializer: put("hi"), putMulti(["ab", ""]), an empty multi.
        assert_eq!(
            encode(&[b"hi"]).unwrap(),
            [0, 1, 0, 1, 1, 0, 0, 0, 2, b'h', b'i', 2]
        );
        let two: [&[u8]; 2] = [b"ab", b""];
        assert_eq!(
            encode(&two).unwrap(),
            [0, 1, 0, 1, 1, 0, 0, 0, 2, b'a', b'b', 1, 0, 0, 0, 0, 2]
        );
        let none: [&[u8]; 0] = [];
        assert_eq!(encode(&none).unwrap(), [0, 1, 0, 1, 2]);
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same_items_and_trailing_bytes_are_ignored() {
        let items: Vec<Vec<u8>> = vec![b"one".to_vec(), vec![], vec![0xff; 300]];
        let mut bytes = encode(&items).unwrap();
        assert_eq!(decode("/q/queue-1", &bytes).unwrap(), items);
        bytes.extend_from_slice(b"after the end");
        assert_eq!(decode("/q/queue-1", &bytes).unwrap(), items);
    }

    #[test]
    fn bytes_not_in_the_format_are_malformed_never_a_panic() {
        let good = encode(&[b"hello"]).unwrap();
        let mut cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![0, 1],
            vec![0, 2, 0, 1, 2],
            vec![0, 1, 0, 1, 7],
            vec![0, 1, 0, 1, 1, 0xff, 0xff, 0xff, 0xff, 2],
            vec![0, 1, 0, 1, 1, 0, 0, 0, 9, b'x', 2],
            b"raw bytes, no envelope".to_vec(),
        ];
        // Every cut of a good node short of its end mark.
        cases.extend((0..good.len()).map(|n| good[..n].to_vec()));
        for bytes in cases {
            assert!(
                matches!(decode("/q/queue-1", &bytes), Err(Error::Malformed { .. })),
                "{bytes:?}"
            );
        }
    }
}
