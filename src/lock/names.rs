//! Protected node names and how contenders are ordered.
//!
//! Every contender node is named `_c_<id>-<lock name><sequence>`, where `<id>` has the shape of
//! a UUID (8-4-4-4-12 hex digits). Its first 16 hex digits are the session id and its last 16 a
//! per-attempt counter, so the name tells operators which session made it, lets a client find
//! its own node after a create whose answer was lost, and is accepted by Apache Curator's
//! protected-name handling. The server appends the 10-digit sequence.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::SessionId;

/// Curator's prefix for protected names.
pub(crate) const PROTECTED_PREFIX: &str = "_c_";

/// The `<id>` of a protected name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProtectedId(String);

impl ProtectedId {
    /// A new id for an attempt under `session`: never one this process drew before, nor
    /// (but by a one-in-2^47 chance) one another process that resumes the same session draws,
    /// since the count starts at a random place in each process.
    pub fn next(session: SessionId) -> ProtectedId {
        static START: OnceLock<u64> = OnceLock::new();
        static ATTEMPTS: AtomicU64 = AtomicU64::new(0);
        let start = *START.get_or_init(|| fastrand::u64(1..1 << 47));
        let counter = start.wrapping_add(ATTEMPTS.fetch_add(1, Ordering::Relaxed));
        ProtectedId::from_parts(session, counter)
    }

    fn from_parts(session: SessionId, counter: u64) -> ProtectedId {
        // UUID-shaped: the session's 16 hex digits as 8-4-4, the counter's as 4-12. Written
        // digit by digit: the `format!` calls with widths here and in `node_prefix` were about
        // 6 % of a contended acquisition's client instructions (callgrind; benches/RESULTS.md,
        // issue 22).
        let s = session.0 as u64;
        let mut id = String::with_capacity(36);
        for (value, digits) in [
            (s >> 32, 8),
            ((s >> 16) & 0xffff, 4),
            (s & 0xffff, 4),
            (counter >> 48, 4),
            (counter & 0xffff_ffff_ffff, 12),
        ] {
            if !id.is_empty() {
                id.push('-');
            }
            push_hex(&mut id, value, digits);
        }
        ProtectedId(id)
    }

    fn session_in(name: &str) -> Option<SessionId> {
        let rest = name.strip_prefix(PROTECTED_PREFIX)?;
        let hex: String = rest.get(..18)?.chars().filter(|c| *c != '-').collect();
        u64::from_str_radix(hex.get(..16)?, 16)
            .ok()
            .map(|v| SessionId(v as i64))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name to create (the server appends the sequence).
    pub fn node_prefix(&self, lock_name: &str) -> String {
        let mut name =
            String::with_capacity(PROTECTED_PREFIX.len() + self.0.len() + 1 + lock_name.len());
        name.push_str(PROTECTED_PREFIX);
        name.push_str(&self.0);
        name.push('-');
        name.push_str(lock_name);
        name
    }
}

/// The low `digits` hex digits of `value`, most significant first, in lower case.
fn push_hex(out: &mut String, value: u64, digits: u32) {
    for i in (0..digits).rev() {
        let nibble = ((value >> (4 * i)) & 0xf) as u32;
        // A nibble is below 16, so a digit of radix 16 always exists.
        out.push(char::from_digit(nibble, 16).unwrap_or('0'));
    }
}

/// The session that created a protected node, read from its name (`_c_<id>-...`); `None` for
/// a name that is not protected. Lets an operator see whose node holds a lock.
pub fn session_of(name: &str) -> Option<SessionId> {
    ProtectedId::session_in(name)
}

/// The 10-digit sequence the server appended to a sequential node's name, or `None` for a
/// child that is not a contender (written by something else).
pub(crate) fn sequence_of(name: &str) -> Option<u32> {
    let tail = name.as_bytes().get(name.len().checked_sub(10)?..)?;
    // Ten digits, read by hand: every name of every listing passes here, and `str::parse`
    // was a tenth of the line's sorting (callgrind, issue 22). Ten digits fit a u64; a value
    // past u32 is no sequence the server makes.
    let value = tail.iter().try_fold(0u64, |v, &b| {
        b.is_ascii_digit().then(|| v * 10 + u64::from(b - b'0'))
    })?;
    u32::try_from(value).ok()
}

/// Read-lock node marker (Curator's).
pub(crate) const READ_NAME: &str = "__READ__";
/// Write-lock node marker (Curator's).
pub(crate) const WRITE_NAME: &str = "__WRIT__";

/// Where a child stands in line (its order), and its own sequence, read once. The order is
/// `(sequence, 0)` for an ordinary contender. A read node made by a downgrade carries the
/// sequence of the write node it came from, `__READ__<write seq>-<seq>` (with or without the
/// dash), and stands right behind that write node: `(write seq, seq)`. That is also how
/// Curator's sorter (the text after `__READ__`, compared as a string) orders it.
fn placed(name: &str) -> Option<((u32, u32), u32)> {
    let seq = sequence_of(name)?;
    let head = &name[..name.len() - 10];
    let head = head.strip_suffix('-').unwrap_or(head);
    let downgrade = head
        .len()
        .checked_sub(10)
        .and_then(|i| head.get(i..).zip(head.get(..i)))
        .filter(|(digits, before)| {
            digits.bytes().all(|b| b.is_ascii_digit()) && before.ends_with(READ_NAME)
        })
        .and_then(|(digits, _)| digits.parse().ok());
    let order = match downgrade {
        Some(write_seq) => (write_seq, seq),
        None => (seq, 0),
    };
    Some((order, seq))
}

/// A child's place in line (see [`placed`]).
#[cfg(test)]
fn order_of(name: &str) -> Option<(u32, u32)> {
    placed(name).map(|(order, _)| order)
}

/// One contender node, as listed under the lock path. It borrows its name from the listing
/// (a contended acquisition reads two listings: their names are not copied one by one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Contender<'a> {
    /// Node name (no parent path).
    pub name: &'a str,
    /// The sequence the server appended to its name.
    pub sequence: u32,
    /// Its place in line (see [`placed`]).
    pub order: (u32, u32),
}

impl Contender<'_> {
    /// True for a write-lock node of a read/write lock (it may downgrade: its read node then
    /// lands right behind it, ahead of everyone queued after it).
    pub fn is_writer(&self) -> bool {
        self.name.contains(WRITE_NAME)
    }

    /// True for a read-lock node. Anything else in a line (a mutex's, a semaphore's, a write
    /// node) excludes readers: a path shared by different recipes stays exclusive.
    pub fn is_reader(&self) -> bool {
        self.name.contains(READ_NAME)
    }
}

/// Below this, a node's sequence came from a parent whose child version had not overflowed, so
/// every node made after it sorts after it. ZooKeeper stops counting a parent's child version
/// at 2^31 − 1: past it, a create gets that suffix again, or (queued behind another) a
/// negative one whose last ten digits read 2 147 483 648 and up, and a later node can sort
/// ahead of an earlier one. Every such suffix reads at least this, or is no sequence at all.
const SOUND_SEQUENCE: u32 = 1_000_000_000;

impl Contender<'_> {
    /// True if no node made after this one can sort ahead of it (see [`SOUND_SEQUENCE`]): the
    /// condition for taking the deletion of the only node ahead as our turn, unlisted.
    pub fn nothing_later_sorts_ahead(&self) -> bool {
        self.sequence < SOUND_SEQUENCE
    }
}

/// The contenders among `children`, in line order. Children without a sequence are not
/// contenders and are left out.
pub(crate) fn sort_contenders<'a, S>(
    children: impl IntoIterator<Item = &'a S>,
) -> Vec<Contender<'a>>
where
    S: AsRef<str> + ?Sized + 'a,
{
    let children = children.into_iter();
    // Room for every child at once (a listing knows its length): collecting through the
    // filter would start at four and grow twice for a line of eight.
    let mut v: Vec<Contender<'a>> =
        Vec::with_capacity(children.size_hint().1.unwrap_or(0).min(1024));
    v.extend(children.filter_map(|name| {
        let name = name.as_ref();
        let (order, sequence) = placed(name)?;
        Some(Contender {
            name,
            sequence,
            order,
        })
    }));
    // Unstable is enough (names are unique, so the order is total) and needs no scratch
    // buffer: this runs on every listing.
    v.sort_unstable_by(|a, b| a.order.cmp(&b.order).then_with(|| a.name.cmp(b.name)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sequence_below_the_overflow_vouches_that_nothing_later_sorts_ahead() {
        let line = [
            "_c_a-latch-0000000005",
            "_c_b-latch-0999999999",
            "_c_c-latch-2147483647",
            "_c_d-latch--2147483648",
        ];
        let sorted = sort_contenders(line.iter());
        let sound = |name: &str| {
            sorted
                .iter()
                .find(|c| c.name == name)
                .map(Contender::nothing_later_sorts_ahead)
        };
        assert_eq!(sound(line[0]), Some(true));
        assert_eq!(sound(line[1]), Some(true));
        assert_eq!(sound(line[2]), Some(false));
        // A negative suffix past the overflow: not sound, or not a contender at all.
        assert_ne!(sound(line[3]), Some(true));
    }
    use proptest::prelude::*;

    proptest! {
    #[test]
    fn node_name_parsers_never_panic(s in ".{0,80}") {
        let _ = sequence_of(&s);
        let _ = order_of(&s);
        let _ = session_of(&s);
        let _ = sort_contenders(&[s.clone(), format!("{s}0000000001")]);
    }

    #[test]
    fn a_sequence_is_read_as_parse_reads_its_last_ten_characters(
        head in "[a-zü_-]{0,4}",
        digits in "[0-9]{0,12}",
        tail in "[0-9aü]?",
    ) {
        let s = format!("{head}{digits}{tail}");
        let by_parse = s
            .get(s.len().saturating_sub(10)..)
            .filter(|t| s.len() >= 10 && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u32>().ok());
        prop_assert_eq!(sequence_of(&s), by_parse);
    }

    #[test]
    fn a_sequence_printed_then_parsed_round_trips(prefix in "[a-zA-Z_-]{0,24}", seq in 0u32..=2_147_483_647) {
        let name = format!("{prefix}{seq:010}");
        prop_assert_eq!(sequence_of(&name), Some(seq));
        prop_assert_eq!(order_of(&name), Some((seq, 0)));
    }

    #[test]
    fn names_of_other_clients_sort_by_their_sequence(a in 0u32..1_000_000, b in 0u32..1_000_000) {
        let kazoo = format!("0f8e1c2d3b4a__lock__{a:010}");
        let other = format!("x-17-{b:010}");
        let listed = [other.clone(), kazoo.clone()];
        let sorted = sort_contenders(&listed);
        prop_assert_eq!(sorted.len(), 2);
        prop_assert!(sorted[0].sequence <= sorted[1].sequence);
    }
    }

    #[test]
    fn protected_ids_are_uuid_shaped_and_carry_the_session() {
        let id = ProtectedId::from_parts(SessionId(0x0100_0015_6676_0000), 0x2a);
        assert_eq!(id.as_str(), "01000015-6676-0000-0000-00000000002a");
        let name = format!("{}0000000007", id.node_prefix("lock-"));
        assert_eq!(
            name,
            "_c_01000015-6676-0000-0000-00000000002a-lock-0000000007"
        );
        assert_eq!(
            ProtectedId::session_in(&name),
            Some(SessionId(0x0100_0015_6676_0000))
        );
        assert_eq!(ProtectedId::session_in("lock-0000000001"), None);
        let negative = ProtectedId::from_parts(SessionId(-1), 1);
        assert_eq!(
            ProtectedId::session_in(&format!("_c_{}", negative.as_str())),
            Some(SessionId(-1))
        );
    }

    #[test]
    fn contenders_sort_by_sequence_whatever_their_prefix() {
        let sorted = sort_contenders([
            "_c_aaaa-lock-0000000003",
            "x-17-0000000001",
            "0f8e__lock__0000000002",
            "_c_bbbb-__WRIT__0000000004",
            "leases",
            "readme",
        ]);
        let seqs: Vec<u32> = sorted.iter().map(|c| c.sequence).collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
        assert!(sorted[3].is_writer() && !sorted[0].is_writer());
        assert_eq!(sequence_of("lock-12345678901"), Some(2_345_678_901));
        assert_eq!(sequence_of("short-1"), None);
        assert_eq!(sequence_of("ü-000000001ü"), None);
        assert_eq!(sequence_of("x4294967295"), Some(u32::MAX));
        assert_eq!(sequence_of("x4294967296"), None);
        assert_eq!(sequence_of("x9999999999"), None);
    }

    #[test]
    fn a_downgrade_read_node_stands_right_behind_its_write_node() {
        let sorted = sort_contenders([
            "_c_b-__WRIT__0000000001",            // queued writer
            "_c_a-__READ__0000000000-0000000002", // downgrade of ...0
            "_c_a-__WRIT__0000000000",            // the writer that downgraded
            "_c_c-__READ__0000000003",            // a later reader
            "_c_d-__READ__00000000000000000004",  // downgrade, no dash
        ]);
        let names: Vec<&str> = sorted.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "_c_a-__WRIT__0000000000",
                "_c_a-__READ__0000000000-0000000002",
                "_c_d-__READ__00000000000000000004",
                "_c_b-__WRIT__0000000001",
                "_c_c-__READ__0000000003",
            ]
        );
        assert_eq!(
            order_of("_c_01000015-6676-0000-0000-000000000011-lock-0000000007"),
            Some((7, 0))
        );
    }

    #[test]
    fn a_protected_id_keeps_every_digit_of_a_large_counter_and_names_its_session() {
        let id = ProtectedId::from_parts(SessionId(0x0123_4567_89ab_cdef), 0xfedc_ba98_7654_3210);
        assert_eq!(id.as_str(), "01234567-89ab-cdef-fedc-ba9876543210");
        let name = format!("{}0000000001", id.node_prefix("lock-"));
        assert_eq!(session_of(&name), Some(SessionId(0x0123_4567_89ab_cdef)));
        assert_eq!(session_of("lock-0000000001"), None);
    }

    #[test]
    fn ten_digits_at_the_end_of_a_lock_name_do_not_make_a_downgrade() {
        // The ten digits before the sequence count as a downgrade's write sequence only after
        // the read marker.
        assert_eq!(order_of("job-1234567890-0000000042"), Some((42, 0)));
        assert_eq!(order_of("job-12345678900000000042"), Some((42, 0)));
        assert_eq!(
            order_of("_c_a-__READ__1234567890-0000000042"),
            Some((1_234_567_890, 42))
        );
    }

    #[test]
    fn readers_are_the_read_nodes_only() {
        let sorted = sort_contenders([
            "_c_a-__READ__0000000001",
            "_c_b-__WRIT__0000000002",
            "_c_c-lock-0000000003",
            "0f8e__lock__0000000004",
        ]);
        let readers: Vec<bool> = sorted.iter().map(|c| c.is_reader()).collect();
        assert_eq!(readers, [true, false, false, false]);
        let writers: Vec<bool> = sorted.iter().map(|c| c.is_writer()).collect();
        assert_eq!(writers, [false, true, false, false]);
    }
}
