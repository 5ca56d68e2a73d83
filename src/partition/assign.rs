//! Who gets which item: rendezvous (highest-random-weight) hashing.

/// The member that owns `item` among `members` (by id): the one whose hash with the item is
/// the highest (ties to the larger id). Every worker computes the same answer from the same
/// membership, and a member that joins or leaves moves only the items it wins or held: about
/// one in N. `None` without members.
pub fn owner_of<'a>(item: &str, members: &'a [String]) -> Option<&'a str> {
    members
        .iter()
        .max_by(|a, b| (weight(a, item), a.as_str()).cmp(&(weight(b, item), b.as_str())))
        .map(String::as_str)
}

/// A stable 64-bit hash of the pair (FNV-1a over `member`, a separator and `item`, then a
/// finalising mix): the same in every process and every build, unlike the standard library's
/// keyed hasher.
fn weight(member: &str, item: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.bytes().chain([0]).chain(item.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finaliser: FNV's low bits alone mix poorly.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("worker-{i}")).collect()
    }

    #[test]
    fn every_item_has_one_owner_and_the_shares_are_even() {
        let members = ids(4);
        let items: Vec<String> = (0..4000).map(|i| format!("p{i}")).collect();
        let mut counts = std::collections::HashMap::new();
        for item in &items {
            *counts.entry(owner_of(item, &members).unwrap()).or_insert(0) += 1;
        }
        assert_eq!(counts.len(), 4);
        for (m, c) in counts {
            assert!((800..1200).contains(&c), "{m} owns {c} of 4000");
        }
        assert_eq!(owner_of("p1", &[]), None);
    }

    #[test]
    fn a_join_or_a_leave_moves_only_the_items_it_must() {
        let before = ids(4);
        let mut after = before.clone();
        after.push("worker-4".into());
        let items: Vec<String> = (0..4000).map(|i| format!("p{i}")).collect();
        let mut moved = 0;
        for item in &items {
            let (was, is) = (owner_of(item, &before), owner_of(item, &after));
            if was != is {
                // Only to the newcomer.
                assert_eq!(is, Some("worker-4"));
                moved += 1;
            }
        }
        assert!(
            (600..1000).contains(&moved),
            "{moved} of 4000 moved on a join"
        );
        // A leave: only the leaver's items move.
        let left: Vec<String> = before[1..].to_vec();
        for item in &items {
            let was = owner_of(item, &before);
            if was != Some("worker-0") {
                assert_eq!(owner_of(item, &left), was);
            }
        }
    }

    #[test]
    fn the_weight_is_stable_across_builds() {
        // Pinned: workers built apart (another compiler, another machine) must agree.
        assert_eq!(weight("worker-1", "partition-7"), 8_499_045_533_485_135_919);
        assert_ne!(weight("a", "b"), weight("b", "a"));
        assert_ne!(weight("ab", ""), weight("a", "b"));
    }
}
