//! Counting a request's prompt tokens before it is sent, for estimates and budgets.
//!
//! OpenAI's models count with the o200k (GPT-4o, GPT-4.1, GPT-5, o-series) or cl100k
//! (GPT-4, GPT-3.5) encodings, through tiktoken-rs (the maintained Rust port of OpenAI's
//! tiktoken); which one follows the model's name, or `SET evalsql.judge.tokenizer` for an
//! Azure deployment whose name says nothing. A chat request is counted the way OpenAI's
//! cookbook does it: 3 tokens per message plus its role and content, and 3 for the reply's
//! priming. Other models get an approximation (4 characters a token), and every estimate
//! says which it used.

use tiktoken_rs::CoreBPE;
use tiktoken_rs::tokenizer::{Tokenizer as Known, get_tokenizer};

/// How prompt tokens are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tokenizer {
    O200k,
    Cl100k,
    /// No known encoding: about 4 characters a token.
    Approximate,
}

/// Tokens per message of the chat format, and the reply's priming, as OpenAI counts them.
const PER_MESSAGE: i64 = 3;
const PRIMING: i64 = 3;

impl Tokenizer {
    /// The encoding `setting` names (`o200k_base`, `cl100k_base`, `approximate`), if any.
    pub fn named(setting: &str) -> Option<Tokenizer> {
        match setting.trim().to_ascii_lowercase().as_str() {
            "o200k_base" | "o200k" => Some(Tokenizer::O200k),
            "cl100k_base" | "cl100k" => Some(Tokenizer::Cl100k),
            "approximate" | "approx" | "chars" => Some(Tokenizer::Approximate),
            _ => None,
        }
    }

    /// The encoding of `model`, by its name.
    pub fn for_model(model: &str) -> Tokenizer {
        match get_tokenizer(&model.to_ascii_lowercase()) {
            Some(Known::O200kBase | Known::O200kHarmony) => Tokenizer::O200k,
            Some(Known::Cl100kBase) => Tokenizer::Cl100k,
            _ => Tokenizer::Approximate,
        }
    }

    /// Its name, as estimates show it.
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::O200k => "o200k_base",
            Tokenizer::Cl100k => "cl100k_base",
            Tokenizer::Approximate => "approximate",
        }
    }

    fn bpe(self) -> Option<&'static CoreBPE> {
        match self {
            Tokenizer::O200k => Some(tiktoken_rs::o200k_base_singleton()),
            Tokenizer::Cl100k => Some(tiktoken_rs::cl100k_base_singleton()),
            Tokenizer::Approximate => None,
        }
    }

    /// The tokens of `text`. Special-token spellings in the text are counted as text, as
    /// the API treats them.
    pub fn count(self, text: &str) -> i64 {
        match self.bpe() {
            Some(bpe) => bpe.count_ordinary(text) as i64,
            None => text.chars().count().div_ceil(4) as i64,
        }
    }

    /// The prompt tokens of a chat request with these `(role, content)` messages.
    pub fn count_chat(self, messages: &[(&str, &str)]) -> i64 {
        messages
            .iter()
            .map(|(role, content)| PER_MESSAGE + self.count(role) + self.count(content))
            .sum::<i64>()
            + PRIMING
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_pick_their_encoding() {
        assert_eq!(Tokenizer::for_model("gpt-4o-mini"), Tokenizer::O200k);
        assert_eq!(Tokenizer::for_model("gpt-4.1-2025-04-14"), Tokenizer::O200k);
        assert_eq!(Tokenizer::for_model("gpt-5"), Tokenizer::O200k);
        assert_eq!(Tokenizer::for_model("gpt-4"), Tokenizer::Cl100k);
        assert_eq!(Tokenizer::for_model("gpt-35-turbo"), Tokenizer::Cl100k);
        assert_eq!(
            Tokenizer::for_model("my-deployment"),
            Tokenizer::Approximate
        );
        assert_eq!(Tokenizer::named("O200K_BASE"), Some(Tokenizer::O200k));
        assert_eq!(Tokenizer::named("sentencepiece"), None);
    }

    #[test]
    fn counts_follow_the_encodings() {
        // "hello world" is two tokens in both encodings.
        assert_eq!(Tokenizer::O200k.count("hello world"), 2);
        assert_eq!(Tokenizer::Cl100k.count("hello world"), 2);
        assert_eq!(Tokenizer::Approximate.count("hello world"), 3);
        // A special token's spelling in user text is text, not one token.
        assert!(Tokenizer::O200k.count("<|endoftext|>") > 1);
        // system + user, 3 per message, 3 priming.
        let n = Tokenizer::O200k.count_chat(&[("system", "hello world"), ("user", "hi")]);
        assert_eq!(n, 3 + 1 + 2 + 3 + 1 + 1 + 3);
    }
}
