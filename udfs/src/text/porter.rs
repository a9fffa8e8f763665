//! Porter stemmer, a port of NLTK 3.10.4 `nltk.stem.porter.PorterStemmer` in
//! its default `NLTK_EXTENSIONS` mode, called as `stemmer.stem(word)` (that is
//! with `to_lowercase=True`).
//!
//! The stemmer works on Unicode scalar values, exactly like the Python code
//! works on `str` characters, so any input (not only ASCII) stems the same way.
//! Lowercasing follows CPython 3.11's `str.lower()` (Unicode 14.0, full case
//! mapping, final-sigma context), the interpreter the golden data was made with.

use super::pystr;

/// Stems `word` like NLTK 3.10.4 `PorterStemmer().stem(word)`.
///
/// Includes NLTK's irregular-forms pool (`skies` -> `sky`, `dying` -> `die`, ...),
/// returns words of at most two characters only lowercased, and applies the
/// NLTK-specific rule variants of steps 1a, 1b, 1c, 2 and the `*o` condition.
pub fn stem(word: &str) -> String {
    let mut out = String::new();
    stem_into(word, &mut Vec::new(), &mut out);
    out
}

/// Same as [`stem`] but appends the stem to `out`, using `scratch` as working
/// storage, so hot loops can avoid allocating per word.
pub fn stem_into(word: &str, scratch: &mut Vec<char>, out: &mut String) {
    if word.is_ascii() {
        // Fast path: ASCII lowercasing cannot change the length, so no
        // intermediate string is needed.
        scratch.clear();
        scratch.extend(word.bytes().map(|b| b.to_ascii_lowercase() as char));
        stem_lowered(scratch, word.len(), out);
    } else {
        let lowered = pystr::lower(word);
        scratch.clear();
        scratch.extend(lowered.chars());
        stem_lowered(scratch, word.chars().count(), out);
    }
}

/// `w` is the lowercased word; `original_len` is the length in characters of
/// the word before lowercasing (NLTK tests the short-word rule on the
/// original, which differs from the lowered length for e.g. 'İ').
fn stem_lowered(w: &mut Vec<char>, original_len: usize, out: &mut String) {
    if let Some(base) = irregular_form(w) {
        out.push_str(base);
        return;
    }
    if original_len > 2 {
        step1a(w);
        step1b(w);
        step1c(w);
        step2(w);
        step3(w);
        step4(w);
        step5a(w);
        step5b(w);
    }
    out.extend(w.iter());
}

/// NLTK's pool of irregular forms, keyed by the lowercased word.
fn irregular_form(w: &[char]) -> Option<&'static str> {
    const POOL: [(&str, &str); 16] = [
        ("sky", "sky"),
        ("skies", "sky"),
        ("dying", "die"),
        ("lying", "lie"),
        ("tying", "tie"),
        ("news", "news"),
        ("innings", "inning"),
        ("inning", "inning"),
        ("outings", "outing"),
        ("outing", "outing"),
        ("cannings", "canning"),
        ("canning", "canning"),
        ("howe", "howe"),
        ("proceed", "proceed"),
        ("exceed", "exceed"),
        ("succeed", "succeed"),
    ];
    if w.len() < 3 || w.len() > 8 {
        return None;
    }
    POOL.iter()
        .find(|(form, _)| eq_ascii(w, form))
        .map(|&(_, base)| base)
}

fn eq_ascii(w: &[char], s: &str) -> bool {
    w.len() == s.len() && w.iter().zip(s.bytes()).all(|(&c, b)| c == b as char)
}

fn ends_with(w: &[char], suffix: &str) -> bool {
    suffix.len() <= w.len() && eq_ascii(&w[w.len() - suffix.len()..], suffix)
}

fn is_vowel(c: char) -> bool {
    matches!(c, 'a' | 'e' | 'i' | 'o' | 'u')
}

/// NLTK's `_is_consonant`: a 'y' is a consonant unless preceded by one; a
/// run of 'y's alternates, resolved by walking back to the run's start.
fn is_consonant(w: &[char], mut i: usize) -> bool {
    if is_vowel(w[i]) {
        return false;
    }
    if w[i] == 'y' {
        let mut negate = false;
        while i > 0 && w[i] == 'y' {
            negate = !negate;
            i -= 1;
        }
        // The run starts after a consonant iff `w[i]` is not a vowel; each
        // 'y' of the run flips the answer.
        return is_vowel(w[i]) == negate;
    }
    true
}

/// Calls `f` with the consonant flag of every position, left to right, in
/// one pass (NLTK's `_consonant_flags`).
fn for_each_consonant_flag(w: &[char], mut f: impl FnMut(bool)) {
    let mut prev = false;
    for (i, &c) in w.iter().enumerate() {
        let flag = if is_vowel(c) {
            false
        } else if c == 'y' {
            i == 0 || !prev
        } else {
            true
        };
        f(flag);
        prev = flag;
    }
}

/// The Porter measure m: the number of vowel-to-consonant transitions.
fn measure(w: &[char]) -> usize {
    let mut m = 0;
    let mut prev_vowel = false;
    for_each_consonant_flag(w, |cons| {
        if cons && prev_vowel {
            m += 1;
        }
        prev_vowel = !cons;
    });
    m
}

fn contains_vowel(w: &[char]) -> bool {
    let mut any = false;
    for_each_consonant_flag(w, |cons| any |= !cons);
    any
}

/// Condition *d: ends with a double consonant.
fn ends_double_consonant(w: &[char]) -> bool {
    let n = w.len();
    n >= 2 && w[n - 1] == w[n - 2] && is_consonant(w, n - 1)
}

/// Condition *o (cvc, last not w/x/y), plus NLTK's two-letter "vc" variant.
fn ends_cvc(w: &[char]) -> bool {
    let n = w.len();
    (n >= 3
        && is_consonant(w, n - 3)
        && !is_consonant(w, n - 2)
        && is_consonant(w, n - 1)
        && !matches!(w[n - 1], 'w' | 'x' | 'y'))
        || (n == 2 && !is_consonant(w, 0) && is_consonant(w, 1))
}

fn replace_tail(w: &mut Vec<char>, remove: usize, replacement: &str) {
    w.truncate(w.len() - remove);
    w.extend(replacement.chars());
}

/// NLTK's `_apply_rule_list` for plain suffix rules: the first rule whose
/// suffix matches decides; if its condition (on the stem without the suffix)
/// fails, the word is left unchanged and later rules are not tried.
fn apply_rules(w: &mut Vec<char>, rules: &[(&str, &str)], cond: impl Fn(&str, &[char]) -> bool) {
    for &(suffix, replacement) in rules {
        if ends_with(w, suffix) {
            let stem_len = w.len() - suffix.len();
            if cond(suffix, &w[..stem_len]) {
                replace_tail(w, suffix.len(), replacement);
            }
            return;
        }
    }
}

fn step1a(w: &mut Vec<char>) {
    if w.len() == 4 && ends_with(w, "ies") {
        replace_tail(w, 3, "ie");
        return;
    }
    apply_rules(
        w,
        &[("sses", "ss"), ("ies", "i"), ("ss", "ss"), ("s", "")],
        |_, _| true,
    );
}

fn step1b(w: &mut Vec<char>) {
    if ends_with(w, "ied") {
        let replacement = if w.len() == 4 { "ie" } else { "i" };
        replace_tail(w, 3, replacement);
        return;
    }
    if ends_with(w, "eed") {
        if measure(&w[..w.len() - 3]) > 0 {
            replace_tail(w, 3, "ee");
        }
        return;
    }
    let mut succeeded = false;
    for suffix in ["ed", "ing"] {
        if ends_with(w, suffix) && contains_vowel(&w[..w.len() - suffix.len()]) {
            w.truncate(w.len() - suffix.len());
            succeeded = true;
            break;
        }
    }
    if !succeeded {
        return;
    }
    // From here `w` is NLTK's `intermediate_stem` (non-empty: it has a vowel).
    for (suffix, replacement) in [("at", "ate"), ("bl", "ble"), ("iz", "ize")] {
        if ends_with(w, suffix) {
            replace_tail(w, suffix.len(), replacement);
            return;
        }
    }
    let last = w[w.len() - 1];
    // NLTK's "*d" pseudo-suffix: on a double consonant it drops one letter;
    // otherwise NLTK still tests the literal suffix "*d" (reachable with
    // words containing '*'), which then removes the '*'.
    if ends_double_consonant(w) || ends_with(w, "*d") {
        if !matches!(last, 'l' | 's' | 'z') {
            w.truncate(w.len() - 2);
            w.push(last);
        }
        return;
    }
    if measure(w) == 1 && ends_cvc(w) {
        w.push('e');
    }
}

fn step1c(w: &mut [char]) {
    if ends_with(w, "y") {
        let n = w.len() - 1;
        if n > 1 && is_consonant(w, n - 1) {
            w[n] = 'i';
        }
    }
}

fn step2(w: &mut Vec<char>) {
    // NLTK applies "alli" -> "al" first and then runs step 2 again.
    if ends_with(w, "alli") && measure(&w[..w.len() - 4]) > 0 {
        replace_tail(w, 4, "al");
        return step2(w);
    }
    const RULES: [(&str, &str); 22] = [
        ("ational", "ate"),
        ("tional", "tion"),
        ("enci", "ence"),
        ("anci", "ance"),
        ("izer", "ize"),
        ("bli", "ble"),
        ("alli", "al"),
        ("entli", "ent"),
        ("eli", "e"),
        ("ousli", "ous"),
        ("ization", "ize"),
        ("ation", "ate"),
        ("ator", "ate"),
        ("alism", "al"),
        ("iveness", "ive"),
        ("fulness", "ful"),
        ("ousness", "ous"),
        ("aliti", "al"),
        ("iviti", "ive"),
        ("biliti", "ble"),
        ("fulli", "ful"),
        ("logi", "log"),
    ];
    let word_len = w.len();
    let word: &[char] = w;
    // The "logi" rule keeps the 'l' with the stem: it tests m(word[:-3]).
    let logi_ok = word_len >= 3 && measure(&word[..word_len - 3]) > 0;
    apply_rules(w, &RULES, |suffix, stem| {
        if suffix == "logi" {
            logi_ok
        } else {
            measure(stem) > 0
        }
    });
}

fn step3(w: &mut Vec<char>) {
    apply_rules(
        w,
        &[
            ("icate", "ic"),
            ("ative", ""),
            ("alize", "al"),
            ("iciti", "ic"),
            ("ical", "ic"),
            ("ful", ""),
            ("ness", ""),
        ],
        |_, stem| measure(stem) > 0,
    );
}

fn step4(w: &mut Vec<char>) {
    apply_rules(
        w,
        &[
            ("al", ""),
            ("ance", ""),
            ("ence", ""),
            ("er", ""),
            ("ic", ""),
            ("able", ""),
            ("ible", ""),
            ("ant", ""),
            ("ement", ""),
            ("ment", ""),
            ("ent", ""),
            ("ion", ""),
            ("ou", ""),
            ("ism", ""),
            ("ate", ""),
            ("iti", ""),
            ("ous", ""),
            ("ive", ""),
            ("ize", ""),
        ],
        |suffix, stem| {
            measure(stem) > 1 && (suffix != "ion" || matches!(stem.last(), Some('s' | 't')))
        },
    );
}

fn step5a(w: &mut Vec<char>) {
    // Both rules share the suffix "e", so unlike `apply_rules` the second
    // condition is tried when the first fails.
    if ends_with(w, "e") {
        let stem = &w[..w.len() - 1];
        let m = measure(stem);
        if m > 1 || (m == 1 && !ends_cvc(stem)) {
            w.pop();
        }
    }
}

fn step5b(w: &mut Vec<char>) {
    if ends_with(w, "ll") && measure(&w[..w.len() - 1]) > 1 {
        w.pop();
    }
}

// ---------------------------------------------------------------------------
// Python 3.11 `str.lower()`.
//
// Rust's `char::to_lowercase` uses the same full (SpecialCasing) mappings as
// CPython, but a newer Unicode version than CPython 3.11 (Unicode 14.0). The
// tables below were generated by comparing every code point under Rust 1.95
// and CPython 3.11.7; they make the result identical to Python 3.11.

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values were produced by running NLTK 3.10.4
    // `PorterStemmer().stem(w)` under CPython 3.11.7.
    #[test]
    fn nltk_vocabulary_samples() {
        let cases = [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("ties", "tie"),
            ("cats", "cat"),
            ("feed", "feed"),
            ("agreed", "agre"),
            ("plastered", "plaster"),
            ("motoring", "motor"),
            ("sing", "sing"),
            ("conflated", "conflat"),
            ("troubled", "troubl"),
            ("sized", "size"),
            ("hopping", "hop"),
            ("falling", "fall"),
            ("hissing", "hiss"),
            ("filing", "file"),
            ("happy", "happi"),
            ("relational", "relat"),
            ("conditional", "condit"),
            ("rational", "ration"),
            ("digitizer", "digit"),
            ("radically", "radic"),
            ("generalization", "gener"),
            ("electrical", "electr"),
            ("hopeful", "hope"),
            ("goodness", "good"),
            ("adjustable", "adjust"),
            ("adoption", "adopt"),
            ("controlling", "control"),
            ("generously", "gener"),
            ("skies", "sky"),
            ("dying", "die"),
            ("innings", "inning"),
            ("news", "news"),
            ("spied", "spi"),
            ("died", "die"),
            ("flies", "fli"),
            ("enjoy", "enjoy"),
            ("archaeology", "archaeolog"),
            ("geology", "geolog"),
            ("by", "by"),
            ("is", "is"),
            ("a", "a"),
            ("yyyyyy", "yyyyyi"),
        ];
        for (word, expected) in cases {
            assert_eq!(stem(word), expected, "stem({word:?})");
        }
    }

    // Also from the Python reference: lowercasing, the short-word rule on the
    // original length, and non-ASCII input.
    #[test]
    fn unicode_and_case() {
        assert_eq!(stem("Running"), "run");
        assert_eq!(stem("SKIES"), "sky");
        assert_eq!(stem("İ"), "i\u{307}");
        assert_eq!(stem("İS"), "i\u{307}s");
        assert_eq!(stem("\u{212A}ISSES"), "kiss");
        assert_eq!(stem("ΣΑΣ"), "σας");
        assert_eq!(stem("naïvely"), "naïv");
        assert_eq!(stem("café"), "café");
        assert_eq!(stem("a*ded"), "ad");
    }
}
