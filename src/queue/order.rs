//! Where an item goes in a queue's line, by its node's name: Curator's names for its plain,
//! priority and delay queues, and the order in which each hands its items out.

use std::time::{SystemTime, UNIX_EPOCH};

/// Every item node's name starts so (Curator's `QUEUE_ITEM_NAME`); any other child of the
/// queue is not an item and is left alone.
pub(crate) const ITEM_PREFIX: &str = "queue-";

/// How a queue orders its items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// By name: first in, first out (`queue-<seq>`).
    Fifo,
    /// By name, which starts with the priority (`queue-<P><seq>`): lower first, then first in.
    Priority,
    /// By the time each is due (`queue-|<ms>|<seq>`), then first in; an item is handed out only
    /// once due.
    Delay,
}

/// The part of an item's name between `queue-` and the server's sequence, for `priority`:
/// Curator's nine characters, a sign (`0` below zero, `1` otherwise) and the value's 32 bits in
/// hexadecimal, so that names sort as the numbers do.
pub(crate) fn priority_infix(priority: i32) -> String {
    format!(
        "{}{:08X}",
        if priority >= 0 { '1' } else { '0' },
        priority as u32
    )
}

/// The part of an item's name that says when it is due, in milliseconds since the Unix epoch
/// (Curator's: hexadecimal between two `|`).
pub(crate) fn delay_infix(due_ms: u64) -> String {
    format!("|{due_ms:08X}|")
}

/// Milliseconds since the Unix epoch at `t` (0 before it).
pub(crate) fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// When the item named `name` is due, as Curator reads it: the hexadecimal between the last
/// two `|`; a name without them (a requeued item) or with anything else there is due now.
fn due_ms(name: &str) -> u64 {
    let Some(last) = name.rfind('|') else {
        return 0;
    };
    let Some(first) = name[..last].rfind('|') else {
        return 0;
    };
    u64::from_str_radix(&name[first + 1..last], 16).unwrap_or(0)
}

/// The server's sequence at the end of an item's name (ten digits; for a name that does not
/// end so, whatever its last ten bytes hold, or nothing: never a panic).
fn sequence(name: &str) -> &str {
    name.get(name.len().saturating_sub(10)..).unwrap_or("")
}

impl Order {
    /// The items among `children` that are due at `now_ms`, in the order they are handed out,
    /// and when the first of the others is due (a delay queue's); children that are not items
    /// are left out.
    pub fn line(self, children: Vec<String>, now_ms: u64) -> (Vec<String>, Option<u64>) {
        let mut items: Vec<String> = children
            .into_iter()
            .filter(|n| n.starts_with(ITEM_PREFIX))
            .collect();
        match self {
            Order::Fifo | Order::Priority => {
                items.sort_unstable();
                (items, None)
            }
            Order::Delay => {
                // Ties broken by sequence, so that items due at once come first in, first out
                // (Curator leaves them in the server's listing order).
                items.sort_unstable_by(|a, b| {
                    (due_ms(a), sequence(a)).cmp(&(due_ms(b), sequence(b)))
                });
                let due = items.partition_point(|n| due_ms(n) <= now_ms);
                let next = items.get(due).map(|n| due_ms(n));
                items.truncate(due);
                (items, next)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_names_are_curators_and_sort_as_the_numbers() {
        // Curator 5.4's DistributedPriorityQueue.
        assert_eq!(priority_infix(10), "10000000A");
        assert_eq!(priority_infix(0), "100000000");
        assert_eq!(priority_infix(i32::MAX), "17FFFFFFF");
        assert_eq!(priority_infix(-1), "0FFFFFFFF");
        assert_eq!(priority_infix(-2), "0FFFFFFFE");
        assert_eq!(priority_infix(i32::MIN), "080000000");
        let ps = [i32::MIN, -300, -2, -1, 0, 1, 9, 10, 255, i32::MAX];
        let names: Vec<String> = ps
            .iter()
            .rev()
            .enumerate()
            .map(|(i, p)| format!("queue-{}{i:010}", priority_infix(*p)))
            .collect();
        let (line, next) = Order::Priority.line(names, 0);
        let got: Vec<&str> = line.iter().map(|n| &n[6..15]).collect();
        let want: Vec<String> = ps.iter().map(|p| priority_infix(*p)).collect();
        assert_eq!(got, want);
        assert_eq!(next, None);
    }

    #[test]
    fn a_delay_queue_hands_out_what_is_due_by_time_then_sequence_and_says_when_the_next_is() {
        // Curator's name for epoch 1700000000000.
        assert_eq!(delay_infix(1_700_000_000_000), "|18BCFE56800|");
        let name = |due: u64, seq: u32| format!("queue-{}{seq:010}", delay_infix(due));
        let children = vec![
            name(3_000, 1),
            name(1_000, 4),
            name(1_000, 2),
            "queue-0000000009".to_owned(), // requeued: due now
            "foreign".to_owned(),
            name(2_000, 3),
        ];
        let (line, next) = Order::Delay.line(children, 2_000);
        assert_eq!(
            line,
            [
                "queue-0000000009".to_owned(),
                name(1_000, 2),
                name(1_000, 4),
                name(2_000, 3)
            ]
        );
        assert_eq!(next, Some(3_000));
    }

    #[test]
    fn a_name_of_any_bytes_never_panics_the_delay_order() {
        // Multi-byte characters where the sequence would be, and no `|` pair at all.
        let names: Vec<String> = [
            "queue-\u{20ac}aaaaaaaa",
            "queue-|\u{20ac}|x",
            "queue-",
            "queue-|12|\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}",
        ]
        .iter()
        .map(|n| n.to_string())
        .collect();
        let (line, _) = Order::Delay.line(names, 1_000);
        assert_eq!(line.len(), 4);
    }

    #[test]
    fn a_plain_queue_is_first_in_first_out_and_skips_foreign_children() {
        let (line, next) = Order::Fifo.line(
            vec![
                "queue-0000000002".into(),
                "lock".into(),
                "queue-0000000001".into(),
            ],
            0,
        );
        assert_eq!(line, ["queue-0000000001", "queue-0000000002"]);
        assert_eq!(next, None);
    }
}
