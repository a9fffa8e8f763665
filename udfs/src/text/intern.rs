//! Token interning for the per-row kernels: distinct tokens of one comparison get dense
//! `u32` ids, so counting and matching compare integers.
//!
//! Written by hand rather than with a hash map (`AHashMap<&str, u32>`, what the kernels
//! used before): a map is allocated or cleared whole per row and hashes every token with
//! a general-purpose string hasher, which profiles of ROUGE-L and BLEU showed as a large
//! part of a short row. This table is reused across rows, sized to the row (it touches
//! only the slots the row needs), keys a token of up to 8 bytes by its bytes (no hashing
//! of strings, no byte comparison) and a longer one by [`token_hash`], keeping only the
//! long tokens' bytes, in one arena. Exact whatever the hash does: a slot matches a token
//! only when its key and length are equal and, for a long token, its bytes, so
//! collisions cost probes, never a wrong id.

/// A fast 64-bit hash of a token: 8-byte words folded in by a 128-bit multiply, the last
/// 1..=8 bytes read as overlapping pieces (the length, hashed too, tells them apart).
#[inline(always)]
pub fn token_hash(t: &[u8]) -> u64 {
    let mut h = t.len() as u64;
    let mut rest = t;
    while rest.len() > 8 {
        h = mix(h ^ u64::from_le_bytes(rest[..8].try_into().expect("8 bytes")));
        rest = &rest[8..];
    }
    mix(h ^ short_key(rest))
}

/// One round of the hash: a 128-bit multiply, folded.
#[inline(always)]
fn mix(x: u64) -> u64 {
    let m = u128::from(x ^ 0x2D35_8DCC_AA6C_78A5) * u128::from(0x9E37_79B9_7F4A_7C15u64);
    (m as u64) ^ ((m >> 64) as u64)
}

/// A slot no token has taken.
const FREE: u32 = u32::MAX;

/// [`token_hash`]'s last word, and [`token_key`] of a short token: a piece of 1..=8
/// bytes read as its first and last four bytes, or first, middle and last byte, which
/// with the length determines it.
#[inline]
fn short_key(t: &[u8]) -> u64 {
    #[inline]
    fn half(b: &[u8]) -> u64 {
        u64::from(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")))
    }
    match t.len() {
        8 => u64::from_le_bytes(t.try_into().expect("8 bytes")),
        4..=7 => half(t) | (half(&t[t.len() - 4..]) << 32),
        1..=3 => {
            u64::from(t[0]) | (u64::from(t[t.len() / 2]) << 8) | (u64::from(t[t.len() - 1]) << 16)
        }
        _ => 0,
    }
}

/// A token of at most 8 bytes as a number: its bytes, little-endian, zero-padded. With
/// the length, that is the token itself, so short tokens, nearly all of them, never need
/// their bytes compared or stored. [`padded_key_at`] reads the same number in one load.
#[inline]
fn padded_key(t: &[u8]) -> u64 {
    debug_assert!(t.len() <= 8);
    let len = t.len();
    if len >= 4 {
        // The first four bytes, and the last four shifted down past the overlap.
        let half = |b: &[u8]| u64::from(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")));
        half(t) | ((half(&t[len - 4..]) >> (8 * (8 - len))) << 32)
    } else if len > 0 {
        // First, middle and last byte, cut to the length ("ab" reads a, b, b).
        let bytes = u64::from(t[0]) | (u64::from(t[len / 2]) << 8) | (u64::from(t[len - 1]) << 16);
        bytes & ((1 << (8 * len)) - 1)
    } else {
        0
    }
}

/// [`padded_key`] of the token `text[start..end]` (at most 8 bytes): one 8-byte load
/// and a mask, so no branch on the length, which follows no pattern a processor could
/// predict. The load is the 8 bytes from `start`, or, for a token in the last 8 bytes of
/// `text`, those last 8 shifted down past the bytes before the token (copying the token
/// instead compiled to a call to `memcpy`, made for the last token or two of every
/// text); only a text shorter than 8 bytes goes through [`padded_key`].
#[inline]
pub(crate) fn padded_key_at(text: &[u8], start: usize, end: usize) -> u64 {
    debug_assert!(end - start <= 8);
    let r8 = |i: usize| u64::from_le_bytes(text[i..i + 8].try_into().unwrap_or([0; 8]));
    // An empty token shifts by 64: no bytes.
    let mask = u64::MAX
        .checked_shr(8 * (8 - (end - start)) as u32)
        .unwrap_or(0);
    if start + 8 <= text.len() {
        r8(start) & mask
    } else if text.len() >= 8 {
        // (`& 63`: an empty token at the very end would shift by 64; its mask is 0.)
        (r8(text.len() - 8) >> ((8 * (start + 8 - text.len())) & 63)) & mask
    } else {
        padded_key(&text[start..end])
    }
}

/// A token's identity in a table: [`short_key`] for a token of at most 8 bytes (with the
/// length, the token itself), else [`token_hash`] (to be confirmed by comparing bytes).
/// For tables of tokens that do not lie in one buffer (f1_score's).
#[inline]
pub fn token_key(t: &[u8]) -> u64 {
    if t.len() <= 8 {
        short_key(t)
    } else {
        token_hash(t)
    }
}

/// [`TokenIds`]' key of a token: [`padded_key`] for a token of at most 8 bytes, else
/// [`token_hash`]; what [`TokenIds::intern_at`] reads in place.
#[inline]
fn ids_key(t: &[u8]) -> u64 {
    if t.len() <= 8 {
        padded_key(t)
    } else {
        token_hash(t)
    }
}

/// The first slot to probe for a key.
#[inline]
pub fn home(key: u64, len: u32) -> u64 {
    mix(key ^ (u64::from(len) << 56))
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    len: u32,
    /// The token's id, or [`FREE`].
    id: u32,
    /// Where a long token's bytes start in the arena.
    start: u32,
}

const EMPTY: Slot = Slot {
    key: 0,
    len: 0,
    id: FREE,
    start: 0,
};

/// Dense ids for the distinct tokens of one comparison, reused across rows.
#[derive(Debug, Default)]
pub struct TokenIds {
    slots: Vec<Slot>,
    /// The bytes of the distinct tokens longer than 8 bytes.
    arena: Vec<u8>,
    mask: usize,
    len: u32,
}

impl TokenIds {
    /// Empties the table, with room for `n` distinct tokens at most half full.
    pub fn reset(&mut self, n: usize) {
        let size = n.saturating_mul(2).next_power_of_two().max(16);
        self.slots.clear();
        self.slots.resize(size, EMPTY);
        self.mask = size - 1;
        self.arena.clear();
        self.len = 0;
    }

    /// Number of distinct tokens so far (ids are below this).
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key of `token` and the slot holding it, or the free one where it would go.
    #[inline]
    fn find(&self, token: &[u8]) -> (u64, usize) {
        let key = ids_key(token);
        (key, self.find_key(key, token))
    }

    /// The slot holding `token`, whose [`ids_key`] is `key`, or the free one where it
    /// would go. (Inlined everywhere: as a call of its own it added a tenth to the
    /// instructions of interning.)
    #[inline(always)]
    fn find_key(&self, key: u64, token: &[u8]) -> usize {
        let len = token.len() as u32;
        let mut i = home(key, len) as usize & self.mask;
        loop {
            let slot = &self.slots[i];
            if slot.id == FREE
                || (slot.key == key
                    && slot.len == len
                    && (len <= 8
                        || &self.arena[slot.start as usize..slot.start as usize + token.len()]
                            == token))
            {
                return i;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The id of `token`, the next free one if it is new. More distinct tokens than
    /// [`Self::reset`] made room for only make the table fuller, until it grows.
    #[inline]
    pub fn intern(&mut self, token: &[u8]) -> u32 {
        let (key, i) = self.find(token);
        self.insert(key, i, token)
    }

    /// [`Self::intern`] of the token `text[start..end]`, whose key is read in one load
    /// when it is short and 8 bytes from `start` lie in `text` (tokens stored back to
    /// back, as in a token list).
    #[inline]
    pub fn intern_at(&mut self, text: &[u8], start: usize, end: usize) -> u32 {
        let token = &text[start..end];
        let key = if token.len() <= 8 {
            padded_key_at(text, start, end)
        } else {
            token_hash(token)
        };
        let i = self.find_key(key, token);
        self.insert(key, i, token)
    }

    /// The id in slot `i`, found for `token` (key `key`); if the slot is free, `token`
    /// is new and takes it with the next id.
    #[inline]
    fn insert(&mut self, key: u64, i: usize, token: &[u8]) -> u32 {
        if self.slots[i].id != FREE {
            return self.slots[i].id;
        }
        let id = self.len;
        let start = self.arena.len() as u32;
        if token.len() > 8 {
            self.arena.extend_from_slice(token);
        }
        self.slots[i] = Slot {
            key,
            len: token.len() as u32,
            id,
            start,
        };
        self.len += 1;
        if 2 * self.len as usize > self.slots.len() {
            self.grow();
        }
        id
    }

    /// The id of `token` if it was interned.
    #[inline]
    pub fn get(&self, token: &[u8]) -> Option<u32> {
        match self.slots[self.find(token).1].id {
            FREE => None,
            id => Some(id),
        }
    }

    /// Doubles the slots, keeping every id.
    #[cold]
    fn grow(&mut self) {
        let size = 2 * self.slots.len();
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; size]);
        self.mask = size - 1;
        for slot in old.into_iter().filter(|s| s.id != FREE) {
            let mut i = home(slot.key, slot.len) as usize & self.mask;
            while self.slots[i].id != FREE {
                i = (i + 1) & self.mask;
            }
            self.slots[i] = slot;
        }
    }
}

/// A map from `u64` keys to `u32` ids for one row (or one pass) at a time: open
/// addressing at most half full, hashed by one multiply, emptied by bumping a stamp
/// instead of clearing the slots. Written by hand rather than an `AHashMap`: profiles
/// of BLEU (repeated n-gram prefixes) and chrF (non-ASCII characters) showed the general
/// map's hashing and probing as a large part of their rows. With [`IdMap::seeded`] the
/// hash is keyed per map, for keys a text chooses (its characters).
#[derive(Default)]
pub struct IdMap {
    slots: Vec<IdSlot>,
    mask: usize,
    /// Slots with another stamp are free.
    stamp: u32,
    seed: u64,
}

#[derive(Clone, Copy, Default)]
struct IdSlot {
    stamp: u32,
    id: u32,
    key: u64,
}

impl IdMap {
    /// An empty map whose hash is keyed by a random seed.
    pub fn seeded() -> Self {
        use std::hash::BuildHasher;
        IdMap {
            seed: std::collections::hash_map::RandomState::new().hash_one(0u8),
            ..IdMap::default()
        }
    }

    /// Empties the map, with room for `n` entries.
    pub fn reset(&mut self, n: usize) {
        let size = n.saturating_mul(2).next_power_of_two().max(16);
        // A table grown for a long row is let go once rows are much shorter, so that
        // short rows probe a table that fits the cache.
        let oversized = self.slots.len() > 4 * size && self.slots.len() > 1 << 12;
        if self.slots.len() < size || oversized || self.stamp == u32::MAX {
            self.slots.clear();
            self.slots.resize(size, IdSlot::default());
            self.mask = size - 1;
            self.stamp = 0;
        }
        self.stamp += 1;
    }

    /// The id stored for `key`, storing `id` if there is none.
    #[inline]
    pub fn get_or_insert(&mut self, key: u64, id: u32) -> u32 {
        let (mask, stamp) = (self.mask, self.stamp);
        // `slots` has `mask + 1` entries: masked indexes need no bounds check.
        let slots = &mut self.slots[..=mask];
        let hash = (key ^ self.seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut i = (hash >> 32) as usize & mask;
        loop {
            let slot = &mut slots[i];
            if slot.stamp != stamp {
                *slot = IdSlot { stamp, id, key };
                return id;
            }
            if slot.key == key {
                return slot.id;
            }
            i = (i + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_and_stable() {
        let mut t = TokenIds::default();
        t.reset(2);
        let words = ["a", "b", "a", "", "ccccccccccccc", "b", "", "dd"];
        let ids: Vec<u32> = words.iter().map(|w| t.intern(w.as_bytes())).collect();
        assert_eq!(ids, [0, 1, 0, 2, 3, 1, 2, 4]);
        assert_eq!(t.len(), 5);
        assert_eq!(t.get(b"ccccccccccccc"), Some(3));
        assert_eq!(t.get(b"cccccccccccc"), None);
        t.reset(1);
        assert!(t.is_empty());
        assert_eq!(t.get(b"a"), None);
        assert_eq!(t.intern(b"dd"), 0);
    }

    #[test]
    fn a_short_tokens_key_is_its_bytes_wherever_it_lies() {
        let text = b"abcdefghijklmnop";
        for start in 0..=text.len() {
            for end in start..=(start + 8).min(text.len()) {
                let t = &text[start..end];
                let mut want = [0u8; 8];
                want[..t.len()].copy_from_slice(t);
                let want = u64::from_le_bytes(want);
                assert_eq!(padded_key(t), want, "{start}..{end}");
                assert_eq!(padded_key_at(text, start, end), want, "{start}..{end}");
                assert_eq!(ids_key(t), want, "{start}..{end}");
            }
        }
    }

    proptest::proptest! {
        /// `intern_at` gives the ids `intern` gives, tokens stored back to back.
        #[test]
        fn interning_in_place_equals_interning_copies(
            words in proptest::collection::vec("[ab\\x{e9}]{0,11}", 0..120),
        ) {
            let text: String = words.concat();
            let (mut a, mut b) = (TokenIds::default(), TokenIds::default());
            a.reset(words.len());
            b.reset(words.len());
            let mut start = 0;
            for w in &words {
                let end = start + w.len();
                proptest::prop_assert_eq!(
                    a.intern_at(text.as_bytes(), start, end),
                    b.intern(w.as_bytes())
                );
                start = end;
            }
        }

        /// Equal ids exactly for equal tokens, through growth, on a small alphabet (many
        /// repeats and shared prefixes).
        #[test]
        fn ids_equal_exactly_for_equal_tokens(
            words in proptest::collection::vec("[ab]{0,12}", 0..200),
            room in 0usize..8,
        ) {
            let mut t = TokenIds::default();
            t.reset(room);
            let mut seen = std::collections::HashMap::new();
            for w in &words {
                let next = seen.len() as u32;
                let want = *seen.entry(w.clone()).or_insert(next);
                proptest::prop_assert_eq!(t.intern(w.as_bytes()), want);
                proptest::prop_assert_eq!(t.get(w.as_bytes()), Some(want));
            }
            proptest::prop_assert_eq!(t.len(), seen.len());
        }
    }
}
