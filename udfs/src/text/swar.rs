//! Bytewise tests on eight bytes at once ("SIMD within a register"), for the byte
//! classes of the tokenizers' hot loops: a per-byte table lookup or comparison compiles
//! to several instructions a byte, these to a few instructions per eight bytes. Portable
//! (plain `u64` arithmetic), so no target feature is assumed.
//!
//! A word's bytes are tested by their high bits. Except in [`not_equal_to`], the
//! bytes must all be below 0x80: then the high bit of each byte of `w + (0x80 - c)` is
//! set exactly when that byte is `>= c`, with no carry between bytes.

/// The high bit of every byte.
pub const HIGH: u64 = 0x8080_8080_8080_8080;
/// The lowercase bit (0x20) of every byte.
const CASE: u64 = 0x2020_2020_2020_2020;

/// The addend that makes [`at_least`] test `byte >= c`.
const fn bias(c: u8) -> u64 {
    (0x80 - c as u64) * 0x0101_0101_0101_0101
}

/// High bit of each byte of `w` (all below 0x80) set when the byte is `>= c`.
#[inline(always)]
const fn at_least(w: u64, c: u8) -> u64 {
    w.wrapping_add(bias(c)) & HIGH
}

/// High bit of each byte of `w` (all below 0x80) set when the byte is in `lo..=hi`.
#[inline(always)]
const fn in_range(w: u64, lo: u8, hi: u8) -> u64 {
    at_least(w, lo) & !at_least(w, hi + 1)
}

/// High bits of the ASCII letters of `w` (all below 0x80).
#[inline(always)]
pub const fn letters(w: u64) -> u64 {
    // Setting 0x20 maps exactly the two letter ranges onto `a..=z`.
    in_range(w | CASE, b'a', b'z')
}

/// High bits of the ASCII digits of `w` (all below 0x80).
#[inline(always)]
pub const fn digits(w: u64) -> u64 {
    in_range(w, b'0', b'9')
}

/// High bits of the bytes of `w` (all below 0x80) equal to `c`.
#[inline(always)]
pub const fn equal_to(w: u64, c: u8) -> u64 {
    in_range(w, c, c)
}

/// High bits of the bytes of `w` that differ from `c`, for bytes of any value: a byte
/// of `x = w ^ c..c` is non-zero exactly there, and its high bit or that of
/// `(x & 0x7f) + 0x7f` is set exactly when it is.
#[inline(always)]
pub const fn not_equal_to(w: u64, c: u8) -> u64 {
    const LOW7: u64 = !HIGH;
    let x = w ^ (c as u64 * 0x0101_0101_0101_0101);
    (((x & LOW7) + LOW7) | x) & HIGH
}

/// High bits of the printable ASCII bytes (`' '..='~'`) of `w` (all below 0x80).
#[cfg(test)]
#[inline(always)]
pub const fn printable(w: u64) -> u64 {
    in_range(w, b' ', b'~')
}

/// `w`'s letters lowercased, given their high bits from [`letters`].
#[inline(always)]
pub const fn lowercase(w: u64, letters: u64) -> u64 {
    w | (letters >> 2)
}

/// The eight high bits of `bits` (only high bits set) as bits 0..8, byte `j`'s as bit
/// `j`: one multiplication moves the bit of byte `j` to bit `56 + j`, without carries.
#[inline(always)]
pub const fn gather(bits: u64) -> u64 {
    (bits >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
}

/// The eight bytes of `s` (at least eight) as a little-endian word.
#[inline(always)]
pub fn word(s: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&s[..8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte value at every position, among neighbours of every kind.
    fn words() -> impl Iterator<Item = [u8; 8]> {
        (0u8..=255).flat_map(|b| {
            [b' ', b'a', b'Z', b'5', b'.', b'\'', 0x7f, 0x00]
                .into_iter()
                .flat_map(move |other| {
                    (0..8).map(move |k| {
                        let mut w = [other; 8];
                        w[k] = b;
                        w
                    })
                })
        })
    }

    #[test]
    fn not_equal_to_takes_any_byte() {
        for bytes in words() {
            let want: u64 = (0..8).map(|j| u64::from(bytes[j] != b' ') << j).sum();
            assert_eq!(
                gather(not_equal_to(u64::from_le_bytes(bytes), b' ')),
                want,
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn classes_agree_with_bytewise_tests() {
        for bytes in words() {
            if bytes.iter().any(|b| !b.is_ascii()) {
                continue;
            }
            let w = u64::from_le_bytes(bytes);
            let bits =
                |f: fn(u8) -> bool| -> u64 { (0..8).map(|j| u64::from(f(bytes[j])) << j).sum() };
            assert_eq!(
                gather(letters(w)),
                bits(|b| b.is_ascii_alphabetic()),
                "{bytes:?}"
            );
            assert_eq!(gather(digits(w)), bits(|b| b.is_ascii_digit()), "{bytes:?}");
            assert_eq!(gather(equal_to(w, b' ')), bits(|b| b == b' '), "{bytes:?}");
            assert_eq!(
                gather(not_equal_to(w, b' ')),
                bits(|b| b != b' '),
                "{bytes:?}"
            );
            assert_eq!(
                gather(printable(w)),
                bits(|b| (b' '..=b'~').contains(&b)),
                "{bytes:?}"
            );
            assert_eq!(
                lowercase(w, letters(w)),
                u64::from_le_bytes(bytes.map(|b| b.to_ascii_lowercase())),
                "{bytes:?}"
            );
        }
    }
}
