//! Text in; an estimate of how many tokens an LLM tokenizer makes of it out.
//!
//! mvk keeps an agent's prompt inside its `context-tokens` budget with this estimate. It follows
//! OpenAI's o200k_base tokenizer (GPT-4o and later) without its vocabulary. The text is cut into
//! pieces as o200k_base's pre-tokenizer pattern cuts it (letters after at most one space or
//! punctuation character, split where lower case turns upper; digits in threes; runs of
//! punctuation; runs of whitespace), and each piece is priced by rules measured against the real
//! tokenizer: a word of up to four letters is one token, a longer one a little more, letter pairs
//! the vocabulary seldom joins (`vk`, `qz`) break a word apart, capitals split sooner, a
//! punctuation run is about one token per two characters, a character beyond ASCII up to a token
//! or two. One pass over the text, no allocation.
//!
//! The rules lean towards counting too many, so that a budget met by the estimate is met under
//! the real tokenizer. Measured by `tests::calibration` on this repository's own text (Rust,
//! Markdown, KDL; 2.39 MB, 603,000 tokens) when this was written, as estimate / real tokens:
//!
//! | tokenizer   | whole text | chunks of ~2 KB: min | median | max   |
//! |-------------|------------|----------------------|--------|-------|
//! | o200k_base  | 1.084      | 1.007                | 1.084  | 1.194 |
//! | cl100k_base | 1.084      | 1.009                | 1.084  | 1.201 |
//!
//! (Bytes / 4 gives 0.992 over the whole text, and 0.55 to 1.88 over the chunks.) The test
//! holds the estimate to 1.0–1.15 over the whole text and 0.95–1.35 on every chunk.
//!
//! Text unlike this repository's strays further (the samples in `tests/fixtures/tokens/`, and
//! others tried by hand): prose in other scripts comes out 0.9 to 1.6; long English words are
//! over-counted (the vocabulary knows them whole); random letters (hashes, base64) and symbols
//! (arrows, emoji) may be under-counted by up to a quarter, rarer characters (mathematical
//! letters) by more. cl100k_base (GPT-4) makes more tokens than o200k_base of most scripts other
//! than Latin. Anthropic's tokenizer is not public: it typically makes somewhat more tokens than
//! o200k_base of code, so a budget meant for a Claude model should keep a margin.

/// The estimate counts in sixteenths of a token, so that a piece can cost a fraction of one.
const UNIT: usize = 16;

/// How many tokens o200k_base makes of `text`, estimated: rather more than fewer.
pub(crate) fn estimate(text: &str) -> usize {
    units(text).div_ceil(UNIT)
}

/// The byte index (a char boundary) where the longest prefix of `text` whose [`estimate`] is at
/// most `max_tokens` ends. It may end inside a word; a caller that cuts at lines steps back to
/// one. Linear in the text, but for a bisection inside the piece where the budget runs out.
pub(crate) fn prefix_within(text: &str, max_tokens: usize) -> usize {
    let budget = max_tokens.saturating_mul(UNIT);
    let mut spent = 0;
    for piece in pieces(text) {
        if spent + piece.units <= budget {
            spent += piece.units;
            continue;
        }
        // A prefix that ends where a piece starts is cut as the whole text is (but that its
        // last whitespace may join the run before it, which costs less), so it costs at most
        // what the pieces before it cost. Of this piece, take what the rest of the budget allows.
        let part = &text[piece.start..piece.end];
        let take = longest(part, |x| spent + units(&part[..x]) <= budget);
        let end = piece.start + take;
        // Cutting a piece can change how the pieces before it are cut: check the whole prefix.
        if take > 0 && units(&text[..end]) <= budget {
            return end;
        }
        return piece.start;
    }
    text.len()
}

/// The byte index (a char boundary) where the longest suffix of `text` whose [`estimate`] is at
/// most `max_tokens` starts; like [`prefix_within`], from the other end.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "for cutting a part to a budget; prompt::fit searches by estimate for now"
    )
)]
pub(crate) fn suffix_within(text: &str, max_tokens: usize) -> usize {
    let budget = max_tokens.saturating_mul(UNIT);
    let total = units(text);
    if total <= budget {
        return 0;
    }
    // A suffix that starts where a piece starts is cut as the whole text is (the pattern looks
    // only forward), so it costs the total less the pieces before it. Find the first such suffix
    // that fits, then take what fits of the piece before it.
    let mut spent = 0;
    let mut previous: Option<Piece> = None;
    for piece in pieces(text) {
        if total - spent <= budget {
            return match previous {
                Some(before) => suffix_in(text, before, total - spent, budget),
                None => piece.start,
            };
        }
        spent += piece.units;
        previous = Some(piece);
    }
    match previous {
        Some(last) => suffix_in(text, last, 0, budget),
        None => text.len(),
    }
}

/// Where the longest suffix within `budget` starts, given that it starts inside `piece` or at
/// its end, after which the text costs `rest`.
fn suffix_in(text: &str, piece: Piece, rest: usize, budget: usize) -> usize {
    let part = &text[piece.start..piece.end];
    let drop = shortest(part, |x| rest + units(&part[x..]) <= budget);
    let begin = piece.start + drop;
    // Starting inside a piece can change how the pieces after it are cut: check the whole suffix.
    if begin < piece.end && units(&text[begin..]) <= budget {
        return begin;
    }
    piece.end
}

/// The largest char boundary `x` of `s` with `fits(x)`, by bisection, as if `fits` held up to
/// some point and not after; `fits(0)` is taken to hold.
fn longest(s: &str, fits: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, s.len());
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(floor_boundary(s, mid)) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    floor_boundary(s, lo)
}

/// The smallest char boundary `x` of `s` with `fits(x)`, by bisection, as if `fits` failed up
/// to some point and held after; `fits(s.len())` is taken to hold.
fn shortest(s: &str, fits: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, s.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(ceil_boundary(s, mid)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    ceil_boundary(s, lo)
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The estimate of `text` in sixteenths of a token.
fn units(text: &str) -> usize {
    pieces(text).map(|piece| piece.units).sum()
}

// The prices, in sixteenths of a token, fitted to o200k_base on this repository's text.

/// A character before a word's letters that often merges with them (`_name`, `.method`,
/// `(self`); a space costs nothing, any other character a token.
const GLUED_LEAD: usize = 3;
/// A contraction (`'s`, `'ll`) after a word: a token of its own, and a little more.
const CONTRACTION: usize = 20;
/// Each of a word's letter pairs that few of the vocabulary's words contain ([`RARE_PAIRS`]):
/// the word is split there more often than not.
const RARE_PAIR: usize = 12;
/// Each character of a punctuation run from the third on, when it differs from the one before;
/// a repeated one (`====`) costs [`REPEAT`].
const PUNCT_CHANGE: usize = 8;
const REPEAT: usize = 1;
/// Each newline after the first that ends a punctuation run (`}\n\n`).
const EXTRA_NEWLINE: usize = 14;
/// A punctuation run of two or more after a space (` =>`, ` });`) merges a little less.
const SPACED_PUNCT: usize = 3;

/// What a character is to o200k_base's pre-tokenizer pattern.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Upper,
    Lower,
    /// A letter without case (CJK, kana) or a mark (accents, vowel signs, variation selectors):
    /// the pattern takes it as upper and as lower.
    Caseless,
    Digit,
    /// `\r` or `\n`: the only whitespace the pattern treats apart.
    Newline,
    Space,
    Other,
}

impl Class {
    fn is_letter(self) -> bool {
        matches!(self, Class::Upper | Class::Lower | Class::Caseless)
    }
}

/// The class of each ASCII byte.
static ASCII: [Class; 128] = {
    let mut table = [Class::Other; 128];
    let mut b = 0;
    while b < 128 {
        table[b] = match b as u8 {
            b'A'..=b'Z' => Class::Upper,
            b'a'..=b'z' => Class::Lower,
            b'0'..=b'9' => Class::Digit,
            b'\r' | b'\n' => Class::Newline,
            b' ' | b'\t' | 0x0b | 0x0c => Class::Space,
            _ => Class::Other,
        };
        b += 1;
    }
    table
};

/// The class of the character at byte `i` of `text` (a char boundary), and its length in bytes.
#[inline(always)]
fn class_at(text: &str, i: usize) -> (Class, usize) {
    let b = text.as_bytes()[i];
    if b < 0x80 {
        (ASCII[usize::from(b)], 1)
    } else {
        class_of_char(text, i)
    }
}

/// [`class_at`] beyond ASCII: rare in source text, so kept out of the loops.
#[inline(never)]
fn class_of_char(text: &str, i: usize) -> (Class, usize) {
    use unicode_general_category::{GeneralCategory as G, get_general_category};
    let Some(c) = text[i..].chars().next() else {
        return (Class::Other, 1);
    };
    let class = match get_general_category(c) {
        G::UppercaseLetter | G::TitlecaseLetter => Class::Upper,
        G::LowercaseLetter => Class::Lower,
        G::ModifierLetter
        | G::OtherLetter
        | G::NonspacingMark
        | G::SpacingMark
        | G::EnclosingMark => Class::Caseless,
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => Class::Digit,
        _ if c.is_whitespace() => Class::Space,
        _ => Class::Other,
    };
    (class, c.len_utf8())
}

/// A piece of text as o200k_base's pattern cuts it, `start..end` in bytes, and its price.
#[derive(Clone, Copy, Debug)]
struct Piece {
    start: usize,
    end: usize,
    units: usize,
}

/// The pieces of a text in order.
struct Pieces<'a> {
    text: &'a str,
    at: usize,
}

fn pieces(text: &str) -> Pieces<'_> {
    Pieces { text, at: 0 }
}

impl Iterator for Pieces<'_> {
    type Item = Piece;

    /// The pattern's alternatives, tried in its order: letters (perhaps after one character
    /// that is neither a letter, a digit nor a newline), digits, punctuation (perhaps after a
    /// space), whitespace.
    #[inline(always)]
    fn next(&mut self) -> Option<Piece> {
        let text = self.text;
        let start = self.at;
        let first = *text.as_bytes().get(start)?;
        let (class, n) = class_at(text, start);
        let (end, units) = match class {
            Class::Upper | Class::Lower | Class::Caseless => word(text, start, 0),
            Class::Digit => number(text, start),
            Class::Newline => whitespace(text, start),
            Class::Space | Class::Other => {
                let next = (start + n < text.len()).then(|| class_at(text, start + n).0);
                if next.is_some_and(Class::is_letter) {
                    let lead = match first {
                        b' ' => 0,
                        b'_' | b'.' | b'(' | b'[' | b'\\' | b'\'' | b',' => GLUED_LEAD,
                        _ => UNIT,
                    };
                    word(text, start + n, lead)
                } else if class == Class::Other {
                    punct(text, start, false)
                } else if first == b' ' && next == Some(Class::Other) {
                    punct(text, start + 1, true)
                } else {
                    whitespace(text, start)
                }
            }
        };
        self.at = end;
        Some(Piece { start, end, units })
    }
}

/// A word's letters from `start`, as the pattern takes them (`[UC]*[LC]+|[UC]+[LC]*` then a
/// contraction, U upper, L lower, C caseless): its end and price, `lead` for what came before.
#[inline(always)]
fn word(text: &str, start: usize, lead: usize) -> (usize, usize) {
    let bytes = text.as_bytes();
    // Most words are ASCII: capitals, then lower case, then no letter beyond ASCII. Their rare
    // pairs are counted on the way; `{` stands for no letter before (its row in the table is
    // empty).
    let (mut i, mut rare_pairs, mut previous) = (start, 0, b'{');
    while i < bytes.len() && bytes[i].is_ascii_uppercase() {
        rare_pairs += rare_pair(previous, bytes[i]);
        previous = bytes[i];
        i += 1;
    }
    let capitals = i - start;
    while i < bytes.len() && bytes[i].is_ascii_lowercase() {
        rare_pairs += rare_pair(previous, bytes[i]);
        previous = bytes[i];
        i += 1;
    }
    let (end, letters) = if bytes.get(i).is_none_or(u8::is_ascii) {
        (i, letters_units(i - start, capitals, rare_pairs))
    } else {
        any_letters(text, start)
    };
    let after = contraction_end(text, end);
    let contraction = if after > end { CONTRACTION } else { 0 };
    (after, (lead + letters + contraction).max(UNIT))
}

/// The price of `count` ASCII letters of a word, `capitals` of them upper case, `rare_pairs` of
/// their pairs rare.
fn letters_units(count: usize, capitals: usize, rare_pairs: usize) -> usize {
    let length = if count >= 2 && capitals == count {
        // All capitals (`HTTP`, `MESSAGE`): the vocabulary has fewer of them.
        UNIT + 5 * count.saturating_sub(3)
    } else {
        // Up to four letters are one token; words grow slowly to eight letters, faster to
        // eleven, and past that are mostly split (names, or no word at all).
        UNIT + 2 * count.min(8).saturating_sub(4)
            + 3 * count.min(11).saturating_sub(8)
            + 8 * count.saturating_sub(11)
    };
    length + rare_pairs * RARE_PAIR
}

/// 1 if the ASCII letters `a` then `b` (either case) are a rare pair ([`RARE_PAIRS`]), else 0.
#[inline(always)]
fn rare_pair(a: u8, b: u8) -> usize {
    let (a, b) = ((a | 0x20).wrapping_sub(b'a'), (b | 0x20).wrapping_sub(b'a'));
    // Letters are below 26: the masks only spare the bounds check.
    ((RARE_PAIRS[usize::from(a & 31)] >> (b & 31)) & 1) as usize
}

/// [`word`]'s letters when some are beyond ASCII: their end and price.
fn any_letters(text: &str, mut i: usize) -> (usize, usize) {
    let len = text.len();
    let mut letters = Letters::default();
    // Where the capitals and caseless letters end at their last caseless one, and what was
    // read by then: the pattern backs off to there when no lower-case letter follows.
    let mut at_caseless = None;
    while i < len {
        let (class, n) = class_at(text, i);
        if !matches!(class, Class::Upper | Class::Caseless) {
            break;
        }
        letters.read(text, i, n);
        i += n;
        if class == Class::Caseless {
            at_caseless = Some((i, letters));
        }
    }
    if i < len && class_at(text, i).0 == Class::Lower {
        while i < len {
            let (class, n) = class_at(text, i);
            if !matches!(class, Class::Lower | Class::Caseless) {
                break;
            }
            letters.read(text, i, n);
            i += n;
        }
    } else if let Some((end, read)) = at_caseless {
        (i, letters) = (end, read);
    }
    (i, letters.units())
}

/// The letters of a word some of whose letters are beyond ASCII, counted as they are read.
#[derive(Clone, Copy, Default)]
struct Letters {
    ascii: usize,
    capitals: usize,
    rare_pairs: usize,
    /// The letter before, when it was ASCII.
    previous: Option<u8>,
    /// Letters of two bytes (accented Latin, Greek, Cyrillic, Hebrew, Arabic) and of three
    /// below U+3000 (Indic scripts, Thai): about two a token on their own.
    half: usize,
    /// Letters of three bytes from U+3000 (CJK, kana, Hangul): about one a token.
    whole: usize,
    /// Letters of four bytes (rarer CJK, mathematical letters): two tokens or more.
    double: usize,
}

impl Letters {
    /// The letter of `n` bytes at byte `i` of `text`.
    fn read(&mut self, text: &str, i: usize, n: usize) {
        let b = text.as_bytes()[i];
        if n == 1 {
            self.ascii += 1;
            self.capitals += usize::from(b.is_ascii_uppercase());
            self.rare_pairs += self.previous.map_or(0, |a| rare_pair(a, b));
            self.previous = Some(b);
            return;
        }
        self.previous = None;
        match n {
            2 => self.half += 1,
            // A lead byte below 0xE3 starts a character below U+3000.
            3 if b < 0xe3 => self.half += 1,
            3 => self.whole += 1,
            _ => self.double += 1,
        }
    }

    fn units(&self) -> usize {
        // Among ASCII letters, a letter beyond ASCII (`Größe`, `brązowy`) is a token of its own.
        let half = if self.ascii > 0 { UNIT } else { UNIT / 2 };
        let mut units = self.half * half + self.whole * UNIT + self.double * 2 * UNIT;
        if self.ascii > 0 {
            units += letters_units(self.ascii, self.capitals, self.rare_pairs);
        }
        units
    }
}

/// `i` moved past a contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`, any case) if one
/// starts there.
fn contraction_end(text: &str, i: usize) -> usize {
    let b = text.as_bytes();
    if b.get(i) != Some(&b'\'') {
        return i;
    }
    let lower = |k: usize| b.get(i + k).map(u8::to_ascii_lowercase);
    match (lower(1), lower(2)) {
        (Some(b's' | b't' | b'm' | b'd'), _) => i + 2,
        (Some(b'r' | b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => i + 3,
        _ => i,
    }
}

/// One to three digits from `start`: one token (the vocabulary holds every ASCII number below
/// a thousand), or one a digit beyond ASCII.
fn number(text: &str, start: usize) -> (usize, usize) {
    let (mut i, mut count) = (start, 0);
    while i < text.len() && count < 3 {
        let (class, n) = class_at(text, i);
        if class != Class::Digit {
            break;
        }
        i += n;
        count += 1;
    }
    let units = if i - start == count {
        UNIT
    } else {
        count * UNIT
    };
    (i, units)
}

/// Punctuation from `i` (after a space when `spaced`), then any newlines and slashes: its end and
/// price. Two characters are most often one token (`::`, `();`), each one after that about half
/// a token unless it repeats the one before; a symbol beyond ASCII is a token of its own, or two.
#[inline(always)]
fn punct(text: &str, mut i: usize, spaced: bool) -> (usize, usize) {
    let bytes = text.as_bytes();
    let (mut ascii, mut changes, mut repeats, mut symbols) = (0, 0, 0, 0);
    let mut previous = None;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x80 {
            if ASCII[usize::from(b)] != Class::Other {
                break;
            }
            ascii += 1;
            if ascii >= 3 {
                if previous == Some(b) {
                    repeats += 1;
                } else {
                    changes += 1;
                }
            }
            previous = Some(b);
            i += 1;
            continue;
        }
        let (class, n) = class_of_char(text, i);
        if class != Class::Other {
            break;
        }
        symbols += if n == 4 { 2 } else { 1 };
        previous = None;
        i += n;
    }
    let mut newlines = 0;
    while i < bytes.len() && matches!(bytes[i], b'\r' | b'\n' | b'/') {
        newlines += usize::from(bytes[i] == b'\n');
        i += 1;
    }
    let mut units = symbols * UNIT + newlines.saturating_sub(1) * EXTRA_NEWLINE;
    if ascii > 0 {
        units += UNIT + changes * PUNCT_CHANGE + repeats * REPEAT;
        if spaced && ascii >= 2 {
            units += SPACED_PUNCT;
        }
    }
    (i, units.max(UNIT))
}

/// Whitespace from `start`: up to the run's last newline if it has one, else the whole run but
/// its last character when something other than whitespace follows (that one goes with the
/// next word). One token unless very long; spaces merge further than tabs and newlines.
#[inline(always)]
fn whitespace(text: &str, start: usize) -> (usize, usize) {
    let len = text.len();
    let (mut i, mut last, mut after_newline) = (start, start, None);
    while i < len {
        let (class, n) = class_at(text, i);
        match class {
            Class::Newline => after_newline = Some(i + n),
            Class::Space => {}
            _ => break,
        }
        last = i;
        i += n;
    }
    let end = match after_newline {
        Some(end) => end,
        None if i < len && last > start => last,
        None => i,
    };
    // Counted apart so that a run one character longer never costs more than a token more:
    // the sum of the pieces before a cut then bounds the prefix's estimate (see prefix_within).
    let spaces = text.as_bytes()[start..end]
        .iter()
        .filter(|&&b| b == b' ')
        .count();
    let others = end - start - spaces;
    let units = UNIT + spaces.saturating_sub(64) / 4 + others.saturating_sub(12) * 9 / 8;
    (end, units)
}

/// Letter pairs, case folded, that fewer than 64 of o200k_base's tokens made of ASCII letters
/// (perhaps after a space) contain: bit `b` of `RARE_PAIRS[a]` for the pair of the `a`th and
/// the `b`th letter (32 entries, the last six empty, so that a masked index needs no bounds
/// check). `tests::rare_pairs_come_from_the_vocabulary` derives the table again.
static RARE_PAIRS: [u32; 32] = [
    0x0000_0000,
    0x02e1_b4e8,
    0x02e1_b26a,
    0x0281_8624,
    0x0000_0000,
    0x02e1_b6ce,
    0x02e1_862c,
    0x02a1_86ee,
    0x0040_0000,
    0x03eb_baee,
    0x02a1_926e,
    0x02c3_0000,
    0x02e3_06ec,
    0x0081_0000,
    0x0000_0000,
    0x02e1_366a,
    0x03ef_fffe,
    0x0081_0200,
    0x0080_0200,
    0x00a1_0642,
    0x0001_0000,
    0x03ed_beee,
    0x02f9_9e6e,
    0x03f7_7eea,
    0x03e1_06e2,
    0x00ef_beee,
    0,
    0,
    0,
    0,
    0,
    0,
];

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Path;
    use tiktoken_rs::CoreBPE;

    #[test]
    fn empty_text_is_no_tokens() {
        assert_eq!(estimate(""), 0);
        assert_eq!(prefix_within("", 0), 0);
        assert_eq!(suffix_within("", 0), 0);
    }

    #[test]
    fn short_common_words_are_a_token_each() {
        // Real: 2 tokens; two five-letter words cost a little more than one each.
        assert_eq!(estimate("hello world"), 3);
        assert_eq!(estimate("a b c d"), 4);
        assert_eq!(estimate(" the"), 1);
    }

    #[test]
    fn long_identifiers_count_several_tokens() {
        assert!(estimate("transactionIdentifierRegistry") >= 3);
        assert!(estimate("parse_kdl_document_with_spans") >= 5);
        assert!(estimate("MAX_RETRY_AFTER_SECONDS") >= 5);
        // Letter pairs the vocabulary seldom joins split a word: random letters cost more.
        assert!(estimate("qzxvjk") > estimate("string"));
    }

    #[test]
    fn digits_go_in_threes_and_whitespace_runs_are_one_token() {
        assert_eq!(estimate("1234567"), 3);
        assert_eq!(estimate("\n\n"), 1);
        assert_eq!(estimate("        "), 1);
        // Real: 1 token; a repeated character costs a sixteenth.
        assert_eq!(estimate("===================="), 3);
    }

    fn cut(text: &str) -> Vec<&str> {
        pieces(text).map(|p| &text[p.start..p.end]).collect()
    }

    #[test]
    fn pieces_cover_the_text_as_the_pattern_cuts_it() {
        assert_eq!(
            cut("fooBar  x_y(1234)\n\n  });\n"),
            [
                "foo", "Bar", " ", " x", "_y", "(", "123", "4", ")\n\n", " ", " });\n"
            ]
        );
        assert_eq!(
            cut("HTTPServer it's 中文"),
            ["HTTPServer", " it's", " 中文"]
        );
    }

    #[test]
    fn a_budget_cuts_a_prefix_and_a_suffix() {
        let text = "one two three four five six";
        assert_eq!(&text[..prefix_within(text, 4)], "one two three");
        // A word that does not fit whole is cut inside.
        assert_eq!(&text[..prefix_within(text, 3)], "one two thre");
        let start = suffix_within(text, 2);
        assert_eq!(&text[start..], " five six");
        assert_eq!(prefix_within(text, 100), text.len());
        assert_eq!(suffix_within(text, 100), 0);
        assert_eq!(prefix_within(text, 0), 0);
        assert_eq!(suffix_within(text, 0), text.len());
    }

    #[test]
    fn a_long_word_is_cut_inside() {
        let word = "a".repeat(1000);
        let end = prefix_within(&word, 10);
        assert!(end > 0 && estimate(&word[..end]) <= 10);
        let start = suffix_within(&word, 10);
        assert!(start < word.len() && estimate(&word[start..]) <= 10);
    }

    /// Text unlike this repository's, one sample a line: prose in other scripts, symbols, emoji.
    /// Kept outside the text [`calibration`] measures, which it would skew.
    fn samples() -> impl Iterator<Item = &'static str> {
        include_str!("../tests/fixtures/tokens/samples.txt").lines()
    }

    /// This repository's own text: Rust, Markdown, KDL and templates, in a fixed order.
    fn repository_text() -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut text = String::new();
        for dir in ["src", "book/src", "stdlib", "loops", "examples"] {
            for entry in walkdir::WalkDir::new(root.join(dir)).sort_by_file_name() {
                let entry = entry.expect("walk the repository");
                let path = entry.path();
                let wanted = ["rs", "md", "kdl", "hbs", "py", "sh", "toml"]
                    .iter()
                    .any(|ext| path.extension().is_some_and(|e| e == *ext));
                if wanted && entry.file_type().is_file() {
                    let file = std::fs::read_to_string(path)
                        .unwrap_or_else(|e| panic!("read `{}`: {e}", path.display()));
                    text.push_str(&file);
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                }
            }
        }
        text
    }

    /// `text` in chunks of about 2 KB, cut after a newline; a short rest joins the last chunk.
    fn chunks(text: &str) -> Vec<&str> {
        let mut cuts = vec![0];
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            at += line.len();
            if at - cuts[cuts.len() - 1] >= 2048 {
                cuts.push(at);
            }
        }
        if at - cuts[cuts.len() - 1] < 1024 && cuts.len() > 1 {
            cuts.pop();
        }
        cuts.push(text.len());
        cuts.windows(2).map(|w| &text[w[0]..w[1]]).collect()
    }

    /// How an estimator compares with a tokenizer: estimate / real over the whole text, and the
    /// smallest, median and largest of it over the chunks.
    struct Figures {
        estimate: usize,
        real: usize,
        total: f64,
        min: f64,
        median: f64,
        max: f64,
    }

    fn measure(text: &str, bpe: &CoreBPE, estimator: fn(&str) -> usize) -> Figures {
        let (estimate, real) = (estimator(text), bpe.encode_ordinary(text).len());
        let mut ratios: Vec<f64> = chunks(text)
            .iter()
            .map(|chunk| estimator(chunk) as f64 / bpe.encode_ordinary(chunk).len() as f64)
            .collect();
        ratios.sort_by(f64::total_cmp);
        Figures {
            estimate,
            real,
            total: estimate as f64 / real as f64,
            min: ratios[0],
            median: ratios[ratios.len() / 2],
            max: ratios[ratios.len() - 1],
        }
    }

    /// The bounds the estimate meets on this repository's text: over the whole of it at least
    /// the real count and at most 15 % more; on no chunk under 95 % or over 135 %.
    fn within_bounds(f: &Figures) -> Result<(), String> {
        if !(1.0..=1.15).contains(&f.total) {
            return Err(format!("total ratio {:.3} outside [1.0, 1.15]", f.total));
        }
        if f.min < 0.95 || f.max > 1.35 {
            let (min, max) = (f.min, f.max);
            return Err(format!(
                "chunk ratios {min:.3}..{max:.3} outside [0.95, 1.35]"
            ));
        }
        Ok(())
    }

    #[test]
    fn calibration() {
        let text = repository_text();
        assert!(
            text.len() > 1_000_000,
            "the repository's text was not found"
        );
        let n = chunks(&text).len();
        for (name, bpe) in [
            ("o200k_base", tiktoken_rs::o200k_base_singleton()),
            ("cl100k_base", tiktoken_rs::cl100k_base_singleton()),
        ] {
            let f = measure(&text, bpe, estimate);
            println!(
                "{name}: {} bytes, estimate {} / real {} = {:.3}; {n} chunks of ~2 KB: \
                 min {:.3}, median {:.3}, max {:.3}",
                text.len(),
                f.estimate,
                f.real,
                f.total,
                f.min,
                f.median,
                f.max
            );
            if let Err(e) = within_bounds(&f) {
                panic!("{name}: {e}");
            }
            // The bounds tell a good estimate from a naive one: bytes / 4 falls outside them.
            let naive = measure(&text, bpe, |s| s.len() / 4);
            println!(
                "{name}, bytes / 4: total {:.3}; chunks min {:.3}, median {:.3}, max {:.3}",
                naive.total, naive.min, naive.median, naive.max
            );
            assert!(
                within_bounds(&naive).is_err(),
                "{name}: bytes / 4 meets the bounds"
            );
        }
        for sample in samples() {
            let real = tiktoken_rs::o200k_base_singleton()
                .encode_ordinary(sample)
                .len();
            println!("{:.2} {sample}", estimate(sample) as f64 / real as f64);
        }
    }

    #[test]
    fn pieces_are_cut_where_o200k_base_cuts() {
        // Encoding piece by piece makes the same tokens as encoding the whole only if no piece
        // crosses a cut of the real pattern.
        let bpe = tiktoken_rs::o200k_base_singleton();
        let text = repository_text();
        let texts: Vec<&str> = samples().collect();
        for sample in texts.into_iter().chain([text.as_str()]) {
            let whole = bpe.encode_ordinary(sample);
            let by_piece: Vec<u32> = pieces(sample)
                .flat_map(|p| bpe.encode_ordinary(&sample[p.start..p.end]))
                .collect();
            assert!(
                whole == by_piece,
                "cut differently: {:?}",
                &sample[..sample.len().min(80)]
            );
        }
    }

    #[test]
    fn rare_pairs_come_from_the_vocabulary() {
        let bpe = tiktoken_rs::o200k_base_singleton();
        let mut counts = [[0usize; 26]; 26];
        for rank in 0..200_000 {
            let Ok(bytes) = bpe.decode_bytes(&[rank]) else {
                continue;
            };
            let letters = bytes.strip_prefix(b" ").unwrap_or(&bytes);
            if letters.len() < 2 || !letters.iter().all(u8::is_ascii_alphabetic) {
                continue;
            }
            let mut seen = [[false; 26]; 26];
            for pair in letters.windows(2) {
                let a = usize::from(pair[0].to_ascii_lowercase() - b'a');
                let b = usize::from(pair[1].to_ascii_lowercase() - b'a');
                if !seen[a][b] {
                    seen[a][b] = true;
                    counts[a][b] += 1;
                }
            }
        }
        let mut table = [0u32; 32];
        for (a, row) in counts.iter().enumerate() {
            for (b, &count) in row.iter().enumerate() {
                if count < 64 {
                    table[a] |= 1 << b;
                }
            }
        }
        assert_eq!(table, RARE_PAIRS);
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[a-zA-Z0-9 _.,:;'(){}\\n\\t\\r/=-]{0,300}",
            "[a-zA-Zé中😀ǅ\u{301}\u{a0} '0-9.\\n]{0,300}",
        ]
    }

    proptest! {
        #[test]
        fn a_prefix_within_the_budget_is_within_it(text in text(), max in 0usize..80) {
            let end = prefix_within(&text, max);
            prop_assert!(text.is_char_boundary(end));
            prop_assert!(estimate(&text[..end]) <= max);
            if estimate(&text) <= max {
                prop_assert_eq!(end, text.len());
            }
        }

        #[test]
        fn a_suffix_within_the_budget_is_within_it(text in text(), max in 0usize..80) {
            let start = suffix_within(&text, max);
            prop_assert!(text.is_char_boundary(start));
            prop_assert!(estimate(&text[start..]) <= max);
            if estimate(&text) <= max {
                prop_assert_eq!(start, 0);
            }
        }

        #[test]
        fn a_cut_where_a_piece_starts_keeps_the_pieces(text in text()) {
            // What prefix_within and suffix_within rely on. The suffix is cut as the whole text
            // is; the prefix too, but that its last whitespace may join the run before it (a run
            // is cut before its last character only when something follows), which costs less.
            let total = units(&text);
            let mut spent = 0;
            for piece in pieces(&text) {
                let (before, after) = text.split_at(piece.start);
                prop_assert!(units(before) <= spent);
                prop_assert_eq!(units(after), total - spent);
                spent += piece.units;
            }
        }
    }
}
