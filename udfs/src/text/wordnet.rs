//! The part of WordNet 3.0 that NLTK's METEOR uses: the single-word lemma names of
//! every synset `nltk.corpus.wordnet.synsets(word)` returns (NLTK 3.10.4), i.e.
//!
//! ```text
//! set(name for s in wordnet.synsets(word) for name in s.lemma_names() if "_" not in name)
//! ```
//!
//! The data is `data/wordnet30.txt`, built by `data/build_wordnet.py` from Princeton's
//! WNdb-3.0 and its morphy exception lists (licence and provenance in
//! `data/wordnet30.NOTICE`). It is embedded as text and read in place: loading is one pass
//! over the lines that notes where each name set starts and puts the lemma and exception
//! lines in hash tables of integers (~4 ms, on a process's first METEOR call). Unpacking
//! it from gzip into a hash map of every lemma and a vector of every name took ~22 ms,
//! which made a one-row METEOR query three times as slow as an F1 one.

use std::cell::RefCell;
use std::sync::{Arc, LazyLock};

use ahash::AHashMap;

use super::intern::token_hash;
use super::pystr;

static DATA: &str = include_str!("../../data/wordnet30.txt");

/// Parts of speech in NLTK's `POS_LIST` order: noun, verb, adjective, adverb.
const NOUN: usize = 0;
const VERB: usize = 1;
const ADJ: usize = 2;
const ADV: usize = 3;

/// Morphy's detachment rules per part of speech (suffix, replacement); adverbs have none.
const RULES: [&[(&str, &str)]; 4] = [
    &[
        ("s", ""),
        ("ses", "s"),
        ("ves", "f"),
        ("xes", "x"),
        ("zes", "z"),
        ("ches", "ch"),
        ("shes", "sh"),
        ("men", "man"),
        ("ies", "y"),
    ],
    &[
        ("s", ""),
        ("ies", "y"),
        ("es", "e"),
        ("es", ""),
        ("ed", "e"),
        ("ed", ""),
        ("ing", "e"),
        ("ing", ""),
    ],
    &[("er", ""), ("est", ""), ("er", "e"), ("est", "e")],
    &[],
];

/// A keyed line of [`DATA`]: where it starts, the length of its key (the text before the
/// separator, or the whole line) and of the rest after the separator.
#[derive(Clone, Copy)]
struct Entry {
    start: u32,
    key_len: u16,
    rest_len: u16,
}

/// Lines found by key through an open-addressing table built on load (linear probing,
/// half empty, keys hashed with the tokens' [`token_hash`]). A slot holds 12 bits of the
/// key's hash over the entry's number plus one (0: empty), so a probe seldom reads an
/// entry or the text but for the key it finds.
///
/// Written here rather than a `HashMap<&str, _>`: filling one with the 112,000 lemmas
/// (hashing each key, growing and probing a table of fat entries) was most of the old
/// 22 ms load; this fills a flat table of integers in a few ms and looks words up as fast.
struct KeyedLines {
    entries: Vec<Entry>,
    slots: Vec<u32>,
    bits: u32,
}

impl KeyedLines {
    fn new(entries: Vec<Entry>) -> Self {
        let bits = (entries.len() * 2)
            .next_power_of_two()
            .max(16)
            .trailing_zeros();
        assert!(entries.len() < 1 << 20, "wordnet30: too many keyed lines");
        let mut slots = vec![0u32; 1 << bits];
        let mask = slots.len() - 1;
        for (n, e) in entries.iter().enumerate() {
            let start = e.start as usize;
            let h = token_hash(&DATA.as_bytes()[start..start + usize::from(e.key_len)]);
            let mut i = (h >> (64 - bits)) as usize;
            while slots[i] != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = (h as u32 & 0xfff0_0000) | (n as u32 + 1);
        }
        KeyedLines {
            entries,
            slots,
            bits,
        }
    }

    /// The rest of the line whose key is `key` (after the separator), if there is one.
    fn find(&self, key: &str) -> Option<&'static str> {
        let h = token_hash(key.as_bytes());
        let mask = self.slots.len() - 1;
        let mut i = (h >> (64 - self.bits)) as usize;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return None;
            }
            if slot & 0xfff0_0000 == h as u32 & 0xfff0_0000 {
                let e = self.entries[(slot & 0x000f_ffff) as usize - 1];
                let start = e.start as usize;
                let key_end = start + usize::from(e.key_len);
                if &DATA.as_bytes()[start..key_end] == key.as_bytes() {
                    let rest = key_end + 1;
                    return Some(DATA.get(rest..rest + usize::from(e.rest_len)).unwrap_or(""));
                }
            }
            i = (i + 1) & mask;
        }
    }
}

struct WordNet {
    /// Name set `k` (names sorted, space-separated) is `DATA[sets[k]..sets[k + 1] - 1]`.
    sets: Vec<u32>,
    /// `lemma TAB ids(noun) | ids(verb) | ids(adj) | ids(adv)`, ids of name sets.
    lemmas: KeyedLines,
    /// Per POS: `form base1 base2 ...` (`*.exc`).
    exceptions: [KeyedLines; 4],
}

static WORDNET: LazyLock<WordNet> = LazyLock::new(load);

fn load() -> WordNet {
    let bytes = DATA.as_bytes();
    // Every line ends in '\n', the last one too.
    let mut ends = memchr::memchr_iter(b'\n', bytes);
    let header_end = ends.next().expect("wordnet30 header");
    let header: Vec<&str> = DATA[..header_end].split(' ').collect();
    assert!(
        header.len() == 8 && header[0] == "WN30M" && header[1] == "1",
        "bad wordnet30 header"
    );
    let count = |i: usize| header[i].parse::<usize>().expect("wordnet30 count");

    // A set's line ends where the next one starts; the last start closes the last set.
    let mut sets = Vec::with_capacity(count(2) + 1);
    sets.push(header_end as u32 + 1);
    sets.extend(ends.by_ref().take(count(2)).map(|end| end as u32 + 1));
    assert_eq!(sets.len(), count(2) + 1, "wordnet30 sets");
    let mut start = *sets.last().unwrap_or(&0) as usize;
    let mut keyed = |n: usize, sep: u8| {
        let entries: Vec<Entry> = ends
            .by_ref()
            .take(n)
            .map(|end| {
                let line = &bytes[start..end];
                let key_len = memchr::memchr(sep, line).unwrap_or(line.len());
                let entry = Entry {
                    start: start as u32,
                    key_len: key_len as u16,
                    rest_len: line.len().saturating_sub(key_len + 1) as u16,
                };
                start = end + 1;
                entry
            })
            .collect();
        assert_eq!(entries.len(), n, "wordnet30 keyed lines");
        KeyedLines::new(entries)
    };
    let lemmas = keyed(count(3), b'\t');
    let exceptions = std::array::from_fn(|p| keyed(count(4 + p), b' '));
    assert!(ends.next().is_none(), "wordnet30 trailing lines");
    WordNet {
        sets,
        lemmas,
        exceptions,
    }
}

/// `out.extend(names.split(' '))`, in a plain loop over the bytes: `split` looks for each
/// space with a searcher set up per piece, which made it the costliest part of a lookup.
fn push_names(names: &'static str, out: &mut Vec<&'static str>) {
    let mut from = 0;
    for (i, b) in names.bytes().enumerate() {
        if b == b' ' {
            out.push(&names[from..i]);
            from = i + 1;
        }
    }
    out.push(&names[from..]);
}

impl WordNet {
    /// Adds the names of the synsets of `form` (if it is a lemma of `pos`).
    fn add_names(&self, form: &str, pos: usize, out: &mut Vec<&'static str>) {
        let Some(columns) = self.lemmas.find(form) else {
            return;
        };
        // Column `pos` of "ids|ids|ids|ids", read byte by byte (as in `push_names`).
        let mut column = 0;
        let mut id: Option<usize> = None;
        for b in columns.bytes().chain([b'|']) {
            match b {
                b'0'..=b'9' if column == pos => {
                    id = Some(id.unwrap_or(0) * 10 + usize::from(b - b'0'));
                }
                b' ' | b'|' => {
                    if let Some(k) = id.take()
                        && let (Some(&from), Some(&to)) = (self.sets.get(k), self.sets.get(k + 1))
                    {
                        push_names(&DATA[from as usize..to as usize - 1], out);
                    }
                    if b == b'|' {
                        column += 1;
                        if column > pos {
                            return;
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// NLTK's `_morphy(form, pos)` folded into the synset union: the form itself plus
    /// either its exception bases (if it is an exception) or every rule output.
    fn collect(&self, form: &str, out: &mut Vec<&'static str>) {
        let mut buf = String::new();
        for pos in [NOUN, VERB, ADJ, ADV] {
            self.add_names(form, pos, out);
            if let Some(bases) = self.exceptions[pos].find(form) {
                for base in bases.split(' ').filter(|s| !s.is_empty()) {
                    self.add_names(base, pos, out);
                }
            } else {
                for &(old, new) in RULES[pos] {
                    if let Some(stem) = form.strip_suffix(old) {
                        buf.clear();
                        buf.push_str(stem);
                        buf.push_str(new);
                        self.add_names(&buf, pos, out);
                    }
                }
            }
        }
    }
}

/// Forces the data to load (e.g. before timing-sensitive work).
pub fn preload() {
    LazyLock::force(&WORDNET);
}

/// The synonym set NLTK 3.10.4's METEOR builds for `word` (before it adds `word` itself):
/// the lemma names without `_` of all synsets of `wordnet.synsets(word)` over nouns,
/// verbs, adjectives and adverbs, sorted by bytes and deduplicated.
///
/// `word` is lowercased with Python's `str.lower` first, as NLTK does; names keep
/// their WordNet spelling (e.g. `Hawaii`). Not cached; see [`synonyms`].
pub fn synonyms_uncached(word: &str) -> Vec<&'static str> {
    let wn = &*WORDNET;
    let lowered;
    let form = if word.bytes().any(|b| b.is_ascii_uppercase()) || !word.is_ascii() {
        lowered = pystr::lower(word);
        lowered.as_str()
    } else {
        word
    };
    let mut out = Vec::new();
    wn.collect(form, &mut out);
    out.sort_unstable();
    out.dedup();
    out
}

/// Entries kept per thread before the cache is dropped and refilled.
const CACHE_LIMIT: usize = 1 << 16;

thread_local! {
    static CACHE: RefCell<AHashMap<Box<str>, Arc<[&'static str]>>> =
        RefCell::new(AHashMap::new());
}

/// [`synonyms_uncached`] behind a per-thread cache (the word is the key).
pub fn synonyms(word: &str) -> Arc<[&'static str]> {
    CACHE.with(|cache| {
        if let Some(hit) = cache.borrow().get(word) {
            return hit.clone();
        }
        let value: Arc<[&'static str]> = synonyms_uncached(word).into();
        let mut cache = cache.borrow_mut();
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(word.into(), value.clone());
        value
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syn(word: &str) -> Vec<&'static str> {
        synonyms(word).to_vec()
    }

    // Expected values from nltk 3.10.4 with WordNet 3.0.
    #[test]
    fn plain_lemmas() {
        assert_eq!(
            syn("dog"),
            [
                "andiron",
                "blackguard",
                "bounder",
                "cad",
                "chase",
                "click",
                "detent",
                "dog",
                "dog-iron",
                "firedog",
                "frank",
                "frankfurter",
                "frump",
                "heel",
                "hotdog",
                "hound",
                "pawl",
                "tag",
                "tail",
                "track",
                "trail",
                "weenie",
                "wiener",
                "wienerwurst"
            ]
        );
        assert_eq!(
            syn("quickly"),
            [
                "apace",
                "chop-chop",
                "cursorily",
                "promptly",
                "quick",
                "quickly",
                "rapidly",
                "speedily"
            ]
        );
    }

    #[test]
    fn morphy_and_case() {
        // Noun exception list, lowercased first.
        assert_eq!(
            syn("Geese"),
            [
                "bozo", "cuckoo", "fathead", "goof", "goofball", "goose", "jackass", "twat", "zany"
            ]
        );
        // Rules: "axes" -> "ax", "axe" (and "axis" from the lemma list), keeping case.
        assert_eq!(syn("axes"), ["Axis", "ax", "axe", "axis", "bloc"]);
        assert!(syn("ran").contains(&"run"));
        assert!(syn("hardest").contains(&"hard"));
        assert_eq!(syn("DOGS"), syn("dog"));
        assert!(syn("xyzzy").is_empty());
        assert!(syn("").is_empty());
    }

    #[test]
    fn markers_and_underscores() {
        // "galore(ip)" is stored with a marker; "ice_cream" only via its lemma key.
        assert_eq!(syn("galore"), ["abounding", "galore"]);
        assert_eq!(syn("ice_cream"), ["icecream"]);
    }
}
