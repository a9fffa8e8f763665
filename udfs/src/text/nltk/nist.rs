//! `nltk.tokenize.nist.NISTTokenizer().international_tokenize(text)` (NLTK 3.10.4), the
//! tokenizer Azure AI Evaluation uses for BLEU/GLEU/METEOR when the text is not ASCII.
//!
//! NLTK runs, in order:
//! 1. delete `<skipped>`; 2. U+2028 -> space; 3. `xml_unescape`;
//! 4. NONASCII `([\x00-\x7f]+)` -> ` \1 `;
//! 5. PUNCT_1 `([Number])([Punctuation])` -> `\1 \2 `;
//! 6. PUNCT_2 `([Punctuation])([Number])` -> ` \1 \2`;
//! 7. SYMBOLS `([Symbol])` -> ` \1 `;
//! 8. `" ".join(text.strip().split()).split()`.
//!
//! Steps 4-7 only insert spaces, so the result is the unescaped text cut at Python
//! whitespace plus at the boundaries where some step inserted a space. Each step is
//! decided locally, which lets one left-to-right scan replace the four regex passes:
//!
//! * Boundary `i` lies between characters `t[i-1]` and `t[i]`.
//! * Step 4 cuts where ASCII-ness changes (`c1`).
//! * Step 5 matches pair `(t[i-1], t[i])` iff it is not cut by step 4, `t[i-1]` is in
//!   Number, `t[i]` in Punctuation, and `t[i-1]` was not consumed as the second
//!   character of a match at `i-1` (regex matches do not overlap, and Punctuation is a
//!   subset of NLTK's Number list, so chains like `a...` alternate). A match cuts
//!   boundaries `i` and `i+1`.
//! * Step 6 is the same on step 5's output with the classes swapped; a match cuts
//!   boundaries `i-1` and `i`.
//! * Step 7 cuts both sides of every Symbol character.
//!
//! Inserted spaces and all Python whitespace are outside the three classes (checked
//! by a test below), so they only ever break adjacency, as the scan models.
//! The class lists are the ones NLTK reads (perluniprops), not current Unicode: its
//! "Number" list is in fact nearly everything *except* numbers (letters, punctuation,
//! symbols; no ASCII digits), which is why `a.b` splits while `3.5` stays whole.

use std::borrow::Cow;
use std::sync::LazyLock;

use super::TokenList;
use crate::text::pystr;

const NUMBER: u8 = 1;
const PUNCT: u8 = 2;
const SYMBOL: u8 = 4;

static PERLUNIPROPS: &str = include_str!("../../../data/perluniprops.txt");

/// Class bits indexed by code point, up to the largest listed one (U+FFFD); code points
/// past the end belong to no class.
static CLASSES: LazyLock<Vec<u8>> = LazyLock::new(|| parse_classes(PERLUNIPROPS));

fn parse_classes(src: &str) -> Vec<u8> {
    let mut ranges = Vec::new();
    for line in src.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, range) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("perluniprops: bad line {line:?}"));
        let bit = match name {
            "Number" => NUMBER,
            "Punctuation" => PUNCT,
            "Symbol" => SYMBOL,
            _ => panic!("perluniprops: unknown class {name:?}"),
        };
        let hex = |s: &str| {
            u32::from_str_radix(s, 16).unwrap_or_else(|_| panic!("perluniprops: bad {s:?}"))
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (hex(a), hex(b)),
            None => (hex(range), hex(range)),
        };
        assert!(first <= last, "perluniprops: bad range {line:?}");
        ranges.push((bit, first, last));
    }
    let len = ranges.iter().map(|r| r.2 as usize + 1).max().unwrap_or(0);
    let mut table = vec![0u8; len];
    for (bit, first, last) in ranges {
        for slot in &mut table[first as usize..=last as usize] {
            *slot |= bit;
        }
    }
    table
}

#[cfg(test)]
fn class_of(table: &[u8], c: char) -> u8 {
    table.get(c as usize).copied().unwrap_or(0)
}

/// [`is_space`](pystr::is_space) and ASCII-ness, beside the class bits in [`INFO`].
const SPACE: u8 = 8;
const ASCII: u8 = 16;
/// ASCII, and neither whitespace, punctuation nor symbol (letters, digits, ...): a run
/// of these is never cut (see [`scan`]).
const QUIET: u8 = 32;
/// ASCII whitespace: with [`QUIET`], the characters between which no step cuts.
const BLANK: u8 = 64;

/// What the scan asks of each character, in one lookup: the class bits plus [`SPACE`]
/// and [`ASCII`], by code point up to U+FFFD (past it: no class, not ASCII, and no
/// Python whitespace lies there).
static INFO: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut info = CLASSES.clone();
    for (cp, slot) in info.iter_mut().enumerate() {
        let c = char::from_u32(cp as u32);
        if c.is_some_and(pystr::is_space) {
            *slot |= SPACE;
        }
        if cp < 0x80 {
            *slot |= ASCII;
            if *slot & (SPACE | PUNCT | SYMBOL) == 0 {
                *slot |= QUIET;
            }
            if *slot & SPACE != 0 {
                *slot |= BLANK;
            }
        }
    }
    info
});

#[inline]
fn info_of(table: &[u8], c: char) -> u8 {
    table.get(c as usize).copied().unwrap_or(0)
}

/// `nltk.tokenize.util.xml_unescape`: `&lt; &gt; &apos; &quot; &#124; &#91; &#93;` and
/// finally `&amp;`, each as a whole-string `str.replace`. The entities cannot overlap
/// (each starts with its only `&`) and no replacement output except the last pass's
/// `&` occurs in an entity, so one scan gives the same result (`&amp;lt;` -> `&lt;`,
/// `&#39;` untouched).
fn xml_unescape(text: &str) -> String {
    const ENTITIES: [(&str, char); 8] = [
        ("&lt;", '<'),
        ("&gt;", '>'),
        ("&apos;", '\''),
        ("&quot;", '"'),
        ("&#124;", '|'),
        ("&#91;", '['),
        ("&#93;", ']'),
        ("&amp;", '&'),
    ];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        match ENTITIES.iter().find(|(e, _)| rest.starts_with(e)) {
            Some(&(e, ch)) => {
                out.push(ch);
                rest = &rest[e.len()..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Steps 1-3: NLTK applies them in this order for `international_tokenize`.
fn preprocess(text: &str) -> Cow<'_, str> {
    let mut t = Cow::Borrowed(text);
    if t.contains("<skipped>") {
        t = Cow::Owned(t.replace("<skipped>", ""));
    }
    if t.contains('\u{2028}') {
        t = Cow::Owned(t.replace('\u{2028}', " "));
    }
    if t.contains('&') {
        t = Cow::Owned(xml_unescape(&t));
    }
    t
}

/// Collects tokens: maximal runs of non-whitespace characters not crossing a cut.
struct Tokens<'a> {
    text: &'a str,
    start: Option<usize>,
    out: &'a mut TokenList,
}

impl Tokens<'_> {
    #[inline]
    fn close(&mut self, end: usize) {
        if let Some(s) = self.start.take() {
            self.out.push(&self.text[s..end]);
        }
    }

    #[inline]
    fn feed(&mut self, pos: usize, space: bool, cut_before: bool) {
        if space {
            self.close(pos);
        } else {
            if cut_before {
                self.close(pos);
            }
            self.start.get_or_insert(pos);
        }
    }
}

/// NLTK's `NISTTokenizer().international_tokenize(text)` with its defaults
/// (`lowercase=False`, `split_non_ascii=True`, `return_str=False`).
pub fn international_tokenize(text: &str) -> Vec<String> {
    let mut out = TokenList::default();
    international_tokenize_into(text, &mut out);
    out.iter().map(str::to_owned).collect()
}

/// [`international_tokenize`], appending the tokens to `out`.
pub fn international_tokenize_into(text: &str, out: &mut TokenList) {
    scan(&preprocess(text), out, true);
}

/// The scan of steps 4-8 over the preprocessed text. With `skip_quiet`, runs of
/// [`QUIET`] and [`BLANK`] characters in the steady state are stepped over a run at a
/// time (see below); without, every character takes the full step (the tests compare
/// the two).
fn scan(t: &str, out: &mut TokenList, skip_quiet: bool) {
    let table: &[u8] = &INFO;
    let bytes = t.as_bytes();
    let mut toks = Tokens {
        text: t,
        start: None,
        out,
    };
    let Some(c0) = t.chars().next() else {
        return;
    };
    // The previous character, whose own leading boundary is settled only once the
    // next character shows whether PUNCT_2 matches there (it cuts before its first char).
    let (mut prev_pos, mut prev_info) = (0, info_of(table, c0));
    let mut pos = c0.len_utf8();
    let mut prev_cut = false;
    let mut m1_prev = false;
    let mut m2_prev = false;
    while pos < bytes.len() {
        // Steady state: the previous character is quiet and nothing is pending. A quiet
        // character next then matches no step (c1: both ASCII; m1: it is no
        // punctuation; m2: the previous one is none; no symbol), so its step only opens
        // the previous character's token if none is open, and leaves this same state
        // with it as the previous character: a whole run of them is one step.
        //
        // The same holds with ASCII whitespace ([`BLANK`]) on either side: no step cuts
        // between two characters that are each quiet or blank (c1: both ASCII; neither is
        // punctuation or symbol; whitespace is in no class), and the state stays clean.
        // Feeding a blank character closes the open token; feeding a quiet one opens one
        // if none is open. So alternating runs of the two, words and the spaces between
        // them, are stepped over a run at a time.
        if skip_quiet && prev_info & (QUIET | BLANK) != 0 && !(prev_cut || m1_prev || m2_prev) {
            let start = pos;
            while pos < bytes.len() {
                let kind = prev_info & (QUIET | BLANK);
                if kind == BLANK {
                    toks.close(prev_pos);
                } else {
                    toks.start.get_or_insert(prev_pos);
                }
                // The rest of this run, then the first character of the other kind.
                let run = bytes[pos..]
                    .iter()
                    .take_while(|&&b| table[usize::from(b)] & kind != 0)
                    .count();
                let next = pos + run;
                let other = (QUIET | BLANK) ^ kind;
                match bytes.get(next) {
                    Some(&b) if table[usize::from(b)] & other != 0 => {
                        // That character's step feeds the run's last one, which the
                        // top of the loop did already (a no-op after the first).
                        prev_pos = next;
                        prev_info = table[usize::from(b)];
                        pos = next + 1;
                    }
                    _ => {
                        if run > 0 {
                            prev_pos = next - 1;
                            prev_info = table[usize::from(bytes[prev_pos])];
                        }
                        pos = next;
                        break;
                    }
                }
            }
            if pos > start {
                continue;
            }
        }
        let c = match bytes[pos] {
            b @ 0..0x80 => char::from(b),
            _ => t[pos..].chars().next().unwrap_or_default(),
        };
        let info = info_of(table, c);
        let c1 = (prev_info ^ info) & ASCII != 0;
        let m1 = !c1 && prev_info & NUMBER != 0 && info & PUNCT != 0 && !m1_prev;
        let cut2 = c1 || m1 || m1_prev;
        let m2 = !cut2 && prev_info & PUNCT != 0 && info & NUMBER != 0 && !m2_prev;
        toks.feed(prev_pos, prev_info & SPACE != 0, prev_cut || m2);
        prev_cut = cut2 || m2 || (prev_info | info) & SYMBOL != 0;
        m1_prev = m1;
        m2_prev = m2;
        (prev_pos, prev_info) = (pos, info);
        pos += c.len_utf8();
    }
    toks.feed(prev_pos, prev_info & SPACE != 0, prev_cut);
    toks.close(t.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(s: &str) -> Vec<String> {
        international_tokenize(s)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        /// Stepping over quiet runs gives the tokens of the character-by-character scan:
        /// letters and digits next to punctuation, symbols, whitespace and non-ASCII.
        #[test]
        fn quiet_runs_change_nothing(
            pieces in proptest::collection::vec(proptest::sample::select(&[
                "a", "Bc", "x1", "7", "42", ".", "..", ",", "-", "'", "$", "+", "=", "^", "|",
                "~", "`", "(", ")", "%", "&", "@", "_", " ", "\t", "\n", "\x1c", "\u{a0}", "é",
                "日本", "€", "—", "«", "»", "٣", "\u{2028}", "\u{1f600}", "Ω", "。", "、",
                "word and words ", "  a b  c ", "\x1f", "\x01", "\x7f", "\u{85}",
            ][..]), 0..30),
        ) {
            let text: String = pieces.concat();
            let (mut fast, mut slow) = (TokenList::default(), TokenList::default());
            scan(&text, &mut fast, true);
            scan(&text, &mut slow, false);
            let (fast, slow): (Vec<&str>, Vec<&str>) = (fast.iter().collect(), slow.iter().collect());
            proptest::prop_assert_eq!(fast, slow, "{:?}", text);
        }
    }

    #[test]
    fn classes_load_and_exclude_whitespace() {
        let table: &[u8] = &CLASSES;
        assert_eq!(table.len(), 0xFFFE);
        let count = |bit: u8| table.iter().filter(|&&b| b & bit != 0).count();
        assert_eq!(count(NUMBER), 14709);
        assert_eq!(count(PUNCT), 593);
        assert_eq!(count(SYMBOL), 3299);
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            if pystr::is_space(c) {
                assert_eq!(class_of(table, c), 0, "{c:?}");
            }
        }
        for d in '0'..='9' {
            assert_eq!(class_of(table, d), 0);
        }
    }

    #[test]
    fn matches_nltk_doctests() {
        let albb = "Alibaba Group Holding Limited (Chinese: 阿里巴巴集团控股 有限公司) is a Chinese e-commerce company...";
        assert_eq!(
            tok(albb)[..10],
            [
                "Alibaba",
                "Group",
                "Holding",
                "Limited",
                "(",
                "Chinese",
                ":",
                "阿里巴巴集团控股",
                "有限公司",
                ")"
            ]
        );
        let amz = "Amazon.com, Inc. (/ˈæməzɒn/) is an American electronic commerce...";
        assert_eq!(
            tok(amz)[..10],
            ["Amazon", ".", "com", ",", "Inc", ".", "(", "/", "ˈæ", "m"]
        );
        assert_eq!(
            tok("this is a foo\u{2604}sentence."),
            ["this", "is", "a", "foo", "\u{2604}", "sentence", "."]
        );
    }

    // Expected values below come from NLTK 3.10.4 (nltk_data perluniprops).
    #[test]
    fn ascii_runs_punctuation_and_digits() {
        assert_eq!(tok("café au lait"), ["caf", "é", "au", "lait"]);
        assert_eq!(tok("a...b é"), ["a", ".", ".", ".", "b", "é"]);
        assert_eq!(
            tok("é 3.5 é, 1,000.00€"),
            ["é", "3.5", "é", ",", "1,000.00", "€"]
        );
        assert_eq!(tok("é a.1 b"), ["é", "a", ".", "1", "b"]);
        assert_eq!(tok("é 1..2"), ["é", "1.", ".", "2"]);
        assert_eq!(tok("é a..1"), ["é", "a", ".", ".1"]);
        assert_eq!(tok("é x--y 5-3 -5"), ["é", "x", "-", "-", "y", "5-3", "-5"]);
        assert_eq!(
            tok("é ¥100 £5 €3 $4"),
            ["é", "¥", "100", "£", "5", "€", "3", "$", "4"]
        );
        assert_eq!(tok("Ωmega—3½"), ["Ω", "mega", "—", "3", "½"]);
        assert_eq!(tok("πr²=α+β"), ["π", "r", "²", "=", "α", "+", "β"]);
        assert_eq!(tok("é ⌈x⌉ ⌊1⌋"), ["é", "⌈", "x", "⌉", "⌊", "1", "⌋"]);
        assert_eq!(
            tok("é 〈1〉 「テスト」。"),
            ["é", "〈", "1", "〉", "「", "テスト", "」", "。"]
        );
        assert_eq!(
            tok("é :-) 😀👍🏽 a1😀"),
            ["é", ":", "-", ")", "😀👍🏽", "a1", "😀"]
        );
        assert_eq!(tok("¿Qué?¡Sí!"), ["¿", "Qu", "é", "?", "¡", "S", "í", "!"]);
    }

    #[test]
    fn unescape_skipped_and_whitespace() {
        assert_eq!(
            tok("é &amp;lt; &lt;skipped&gt; <skipped> <skip<skipped>ped>"),
            [
                "é", "&", "lt", ";", "<", "skipped", ">", "<", "skipped", ">"
            ]
        );
        assert_eq!(
            tok("é\u{2028}x&#39;y&apos;z&quot;&#124;&#91;&#93;&gt;"),
            [
                "é", "x", "&", "#39", ";", "y", "'", "z", "\"", "|", "[", "]", ">"
            ]
        );
        assert_eq!(tok("é a&b&&amp;c"), ["é", "a", "&", "b", "&", "&", "c"]);
        assert_eq!(
            tok("é\x1cx\u{85}y\u{a0}z\u{200b}w"),
            ["é", "x", "y", "z", "\u{200b}", "w"]
        );
        assert!(tok("").is_empty());
        assert!(tok("  \u{3000} ").is_empty());
        assert_eq!(tok("é"), ["é"]);
    }
}
