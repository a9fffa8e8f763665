//! Robustness of every text kernel and tokenizer: arbitrary UTF-8 (control characters, lone
//! combining marks, every kind of Python whitespace, entities, emoji, CJK), long inputs and
//! pathological runs. The property is simply "returns, with a value in range": no panic, no
//! NaN, no unbounded time. CI runs a bounded number of cases (`EVALSQL_FUZZ_CASES`,
//! default 48 per property); raise it locally for a longer hunt.

use proptest::prelude::*;

use super::{
    bleu, chrf, exact_match, f1_score, gleu, meteor, nltk, porter, rouge, sacrebleu, tokenize_13a,
    tokenize_qa,
};

fn cases() -> u32 {
    std::env::var("EVALSQL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

/// Pieces chosen to reach the tokenizers' special cases, mixed with arbitrary characters.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<char>().prop_map(String::from),
        "[a-zA-Z]{1,8}",
        "[0-9]{1,4}",
        Just(" ".to_string()),
        Just("  ".to_string()),
        Just("\n".to_string()),
        Just("\r\n".to_string()),
        Just("\t".to_string()),
        prop::sample::select(vec![
            ".",
            ",",
            "-",
            "'",
            "\"",
            "``",
            "''",
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            "&",
            ";",
            ":",
            "!",
            "?",
            "...",
            "--",
            "n't",
            "'s",
            "Mr.",
            "U.S.",
            "e.g.",
            "3.5",
            "1,000",
            "-5",
            "&amp;",
            "&lt;",
            "&gt;",
            "&quot;",
            "&apos;",
            "&#124;",
            "&#91;",
            "<skipped>",
            "\u{1c}",
            "\u{1f}",
            "\u{85}",
            "\u{a0}",
            "\u{2028}",
            "\u{2029}",
            "\u{3000}",
            "\u{200b}",
            "\u{feff}",
            "\u{0}",
            "\u{7f}",
            "\u{301}",
            "\u{308}",
            "\u{20dd}",
            "é",
            "e\u{301}",
            "İ",
            "ß",
            "Σ",
            "ς",
            "\u{212a}",
            "東京",
            "日本語",
            "🚀",
            "👍🏽",
            "😀",
            "€",
            "½",
            "①",
            "٣",
            "мир",
            "مرحبا",
            "ﬁ",
            "⌈",
            "\u{10ffff}",
        ])
        .prop_map(str::to_string),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..60).prop_map(|p| p.concat())
}

fn in_unit(x: f64) -> bool {
    (0.0..=1.0 + 1e-12).contains(&x)
}

fn in_percent(x: f64) -> bool {
    (0.0..=100.0 + 1e-9).contains(&x)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn tokenizers_never_panic(s in text()) {
        let _ = tokenize_qa::qa_tokens(&s);
        let _ = rouge::tokenize(&s, true);
        let _ = tokenize_13a::tokenize_13a(&s);
        let _ = nltk::word_tokenize::word_tokenize(&s);
        let _ = nltk::punkt::sent_tokenize(&s);
        let _ = nltk::nist::international_tokenize(&s);
        for w in s.split(' ') {
            let _ = porter::stem(w);
        }
    }

    #[test]
    fn sentence_metrics_stay_in_range(r in text(), g in text()) {
        prop_assert!(in_unit(exact_match::exact_match(&r, &g)));
        prop_assert!(in_unit(f1_score::f1_score(&r, &g)));
        prop_assert!(in_unit(bleu::bleu(&r, &g)));
        prop_assert!(in_unit(gleu::gleu(&r, &g)));
        prop_assert!(in_unit(meteor::meteor(&r, &g, 0.9, 3.0, 0.5)));
        for t in [rouge::RougeType::N(1), rouge::RougeType::N(4), rouge::RougeType::L, rouge::RougeType::LSum] {
            for stem in [false, true] {
                let s = rouge::rouge_split(&r, &g, t, stem, true);
                prop_assert!(in_unit(s.precision) && in_unit(s.recall) && in_unit(s.fmeasure));
                let s = rouge::rouge(&r, &g, t, stem);
                prop_assert!(in_unit(s.precision) && in_unit(s.recall) && in_unit(s.fmeasure));
            }
        }
        prop_assert!(in_percent(sacrebleu::sentence_bleu(&r, &[&g], true)));
        prop_assert!(in_percent(sacrebleu::sentence_bleu(&r, &[&g, &r], false)));
        prop_assert!(in_percent(chrf::sentence_chrf(&r, &[&g])));
        prop_assert!(in_percent(chrf::sentence_chrf(&r, &[&g, &r])));
    }
}

/// Long inputs and long runs of one character: each kernel returns. Sizes are chosen so a
/// debug build finishes in seconds; the quadratic ones (LCS, METEOR's alignment) are
/// quadratic in the references too.
#[test]
fn long_inputs_return() {
    let prose = "The quick brown fox, Mr. Smith's dog, can't jump 3.5 m. ".repeat(400);
    let unicode = "Ünïcödé 東京 🚀 e\u{301} &amp; <skipped> ".repeat(400);
    let runs = [
        ".".repeat(20_000),
        "a".repeat(20_000),
        "-".repeat(20_000),
        "\u{301}".repeat(5_000),
        "'".repeat(5_000),
        "1.".repeat(5_000),
        "&".repeat(5_000),
    ];
    for s in runs.iter().chain([&prose, &unicode]) {
        let _ = nltk::azure_tokens(s);
        let _ = nltk::punkt::sent_tokenize(s);
        let _ = tokenize_13a::tokenize_13a(s);
        let _ = porter::stem(s);
        assert!(in_unit(f1_score::f1_score(s, &prose)));
        assert!(in_unit(bleu::bleu(s, &prose)));
        assert!(in_unit(gleu::gleu(s, &prose)));
        assert!(in_percent(sacrebleu::sentence_bleu(s, &[&prose], true)));
        assert!(in_percent(chrf::sentence_chrf(s, &[&prose])));
    }
    assert!(in_unit(
        rouge::rouge(&prose, &prose, rouge::RougeType::L, true).fmeasure
    ));
    assert!(in_unit(
        rouge::rouge_split(&prose, &unicode, rouge::RougeType::LSum, false, true).fmeasure
    ));
    assert!(in_unit(meteor::meteor(
        &prose[..4000],
        &prose[..4000],
        0.9,
        3.0,
        0.5
    )));
}

/// A 200,000-token pair through every text kernel: values in range, memory far from
/// quadratic (a table over both texts would take tens of gigabytes). rougeL and rougeLsum
/// have their own test in `rouge.rs`.
#[test]
fn a_200000_token_pair_through_every_text_kernel() {
    let n = 200_000;
    let response: String = (0..n).map(|i| format!("w{} ", i % 5000)).collect();
    let truth: String = (0..n).map(|i| format!("w{} ", (i * 7) % 5000)).collect();
    let unit = |x: f64| (0.0..=1.0).contains(&x);
    assert!(unit(f1_score::f1_score(&response, &truth)));
    assert!(unit(exact_match::exact_match(&response, &truth)));
    assert!(unit(bleu::bleu(&response, &truth)));
    assert!(unit(gleu::gleu(&response, &truth)));
    assert!(unit(meteor::meteor(&response, &truth, 0.9, 3.0, 0.5)));
    for n_gram in [1, 2] {
        let s = rouge::rouge(&response, &truth, rouge::RougeType::N(n_gram), false);
        assert!(unit(s.fmeasure));
    }
    assert!((0.0..=100.0).contains(&chrf::sentence_chrf(&response, &[truth.as_str()])));
    assert!((0.0..=100.0).contains(&sacrebleu::sentence_bleu(
        &response,
        &[truth.as_str()],
        true
    )));
    if let Some(peak) = crate::common::peak_rss() {
        assert!(peak < 600 << 20, "peak RSS {} MiB", peak >> 20);
    }
}
