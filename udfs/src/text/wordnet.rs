//! The part of WordNet 3.0 that NLTK's METEOR uses: the single-word lemma names of
//! every synset `nltk.corpus.wordnet.synsets(word)` returns (NLTK 3.10.4), i.e.
//!
//! ```text
//! set(name for s in wordnet.synsets(word) for name in s.lemma_names() if "_" not in name)
//! ```
//!
//! The data is `data/wordnet30.txt.gz`, built by `data/build_wordnet.py` from Princeton's
//! WNdb-3.0 and its morphy exception lists (licence and provenance in
//! `data/wordnet30.NOTICE`). It is decoded once per process on first use.

use std::cell::RefCell;
use std::io::Read;
use std::sync::{Arc, LazyLock};

use ahash::AHashMap;

use super::pystr;

static DATA_GZ: &[u8] = include_bytes!("../../data/wordnet30.txt.gz");

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

struct WordNet {
    /// Name set `k` is `names[set_start[k]..set_start[k + 1]]`, sorted.
    set_start: Vec<u32>,
    names: Vec<&'static str>,
    /// Lemma -> bounds into `set_ids`: POS `p` uses `set_ids[b[p]..b[p + 1]]`.
    index: AHashMap<&'static str, [u32; 5]>,
    set_ids: Vec<u32>,
    /// Per POS: inflected form -> base forms (`*.exc`).
    exceptions: [AHashMap<&'static str, Vec<&'static str>>; 4],
}

static WORDNET: LazyLock<WordNet> = LazyLock::new(load);

fn load() -> WordNet {
    let mut text = String::new();
    flate2::read::GzDecoder::new(DATA_GZ)
        .read_to_string(&mut text)
        .expect("embedded wordnet30.txt.gz is valid gzip UTF-8");
    // Everything borrows from the text for the life of the process.
    let text: &'static str = Box::leak(text.into_boxed_str());
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    assert!(
        header.len() == 8 && header[0] == "WN30M" && header[1] == "1",
        "bad wordnet30 header"
    );
    let count = |i: usize| header[i].parse::<usize>().expect("wordnet30 count");

    let n_sets = count(2);
    let mut set_start = Vec::with_capacity(n_sets + 1);
    let mut names = Vec::with_capacity(n_sets * 2);
    for _ in 0..n_sets {
        set_start.push(names.len() as u32);
        names.extend(lines.next().expect("wordnet30 sets").split(' '));
    }
    set_start.push(names.len() as u32);

    let n_lemmas = count(3);
    let mut index = AHashMap::with_capacity(n_lemmas);
    let mut set_ids = Vec::with_capacity(n_lemmas * 2);
    for _ in 0..n_lemmas {
        let line = lines.next().expect("wordnet30 lemmas");
        let (lemma, cols) = line.split_once('\t').expect("wordnet30 lemma line");
        let mut bounds = [0u32; 5];
        bounds[0] = set_ids.len() as u32;
        for (p, col) in cols.split('|').enumerate() {
            set_ids.extend(col.split(' ').filter(|s| !s.is_empty()).map(parse_u32));
            bounds[p + 1] = set_ids.len() as u32;
        }
        index.insert(lemma, bounds);
    }

    let exceptions = std::array::from_fn(|p| {
        let n = count(4 + p);
        let mut map = AHashMap::with_capacity(n);
        for _ in 0..n {
            let mut terms = lines.next().expect("wordnet30 exceptions").split(' ');
            let form = terms.next().unwrap_or("");
            map.insert(form, terms.collect());
        }
        map
    });
    WordNet {
        set_start,
        names,
        index,
        set_ids,
        exceptions,
    }
}

fn parse_u32(s: &str) -> u32 {
    s.bytes()
        .fold(0u32, |acc, b| acc * 10 + u32::from(b.wrapping_sub(b'0')))
}

impl WordNet {
    /// Adds the names of the synsets of `form` (if it is a lemma of `pos`).
    fn add_names(&self, form: &str, pos: usize, out: &mut Vec<&'static str>) {
        if let Some(b) = self.index.get(form) {
            for &k in &self.set_ids[b[pos] as usize..b[pos + 1] as usize] {
                let k = k as usize;
                out.extend_from_slice(
                    &self.names[self.set_start[k] as usize..self.set_start[k + 1] as usize],
                );
            }
        }
    }

    /// NLTK's `_morphy(form, pos)` folded into the synset union: the form itself plus
    /// either its exception bases (if it is an exception) or every rule output.
    fn collect(&self, form: &str, out: &mut Vec<&'static str>) {
        let mut buf = String::new();
        for pos in [NOUN, VERB, ADJ, ADV] {
            self.add_names(form, pos, out);
            if let Some(bases) = self.exceptions[pos].get(form) {
                for base in bases {
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
